package config

import "strings"

// settingByEnv is the setting whose environment name is env.
func settingByEnv(env string) (Setting, bool) {
	for _, s := range Settings {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// closest is the setting's environment name most like name, ignoring
// case, and how many edits away it is.
func closest(name string) (string, int) {
	name = strings.ToUpper(name)
	best, dist := "", -1
	for _, s := range Settings {
		if d := editDistance(name, s.Env); dist < 0 || d < dist {
			best, dist = s.Env, d
		}
	}
	return best, dist
}

// editDistance is the Levenshtein distance between a and b: the fewest
// insertions, deletions and substitutions of bytes that turn one into the
// other.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Misspelling is an environment variable that is no setting but looks
// like one: Setting is the one it most likely meant.
type Misspelling struct {
	Name, Setting string
}

// Misspelt finds, in environ (os.Environ's form, NAME=value), the
// variables that look like misspelt settings: a name that starts as a
// setting does (BATCH_, STREAM_, UPSTREAM_, ...) and is within a small
// edit distance of one, or is one in the wrong case. Such a variable is
// ignored by Load, which would otherwise go unnoticed. Values are never
// looked at: one may be a secret.
func Misspelt(environ []string) []Misspelling {
	var found []Misspelling
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := settingByEnv(name); ok || !hasSettingPrefix(strings.ToUpper(name)) {
			continue
		}
		near, d := closest(name)
		// Two edits, at most one per four characters: a dropped or doubled
		// letter, a swap, but not a different word.
		if d <= 2 && d*4 <= len(name) {
			found = append(found, Misspelling{Name: name, Setting: near})
		}
	}
	return found
}

// hasSettingPrefix reports whether name starts with the first word of a
// setting's name and its underscore.
func hasSettingPrefix(name string) bool {
	for _, s := range Settings {
		if word, _, ok := strings.Cut(s.Env, "_"); ok && strings.HasPrefix(name, word+"_") {
			return true
		}
	}
	return false
}
