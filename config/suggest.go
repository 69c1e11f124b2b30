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
