// Package docs holds sluice's documentation pages; this test keeps their
// links true.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// Every relative link in README.md and docs/*.md names a file of the
// repository, and, when it names an anchor in a Markdown page, a heading of
// that page: pages move, and a reader who follows a dead link is lost.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	anchors := map[string]map[string]bool{} // page path → its headings' anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(b)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if isAbsolute(target) {
				continue
			}
			checked++
			path := page // a bare #anchor is in the page itself
			if target != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading with the anchor #%s", page, l.line, l.target, path, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked only %d relative links; the pages hold more, so the link pattern no longer finds them", checked)
	}
}

// Every docs/<page>.md that Go code names (the settings' meanings that --help
// prints, the commands' usage, comments) is a page of this folder.
func TestGoNamesExistingPages(t *testing.T) {
	pageRE := regexp.MustCompile(`docs/([A-Za-z0-9_.-]+\.md)`)
	named := 0
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range pageRE.FindAllStringSubmatch(string(b), -1) {
			named++
			if _, err := os.Stat(m[1]); err != nil {
				t.Errorf("%s names %s: no such page", path, m[0])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named < 10 {
		t.Errorf("found only %d pages named in Go files; the walk no longer reaches them", named)
	}
}

// The anchors are GitHub's, which the pages' links are written for.
func TestHeadingAnchors(t *testing.T) {
	page := "# Top\n## `sluice bench`: plain vs windowed (issue 4)\n```sh\n# not a heading\n```\n## Top\n### BATCH_ENABLED, *on*\n## [A link](x.md) here\n"
	got := headingAnchors(page)
	for _, want := range []string{"top", "sluice-bench-plain-vs-windowed-issue-4", "top-1", "batch_enabled-on", "a-link-here"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment in a code block was taken for a heading: %v", got)
	}
}

// The link pattern finds inline links and images, and nothing in code.
func TestLinksFound(t *testing.T) {
	page := "See [a](a.md) and ![b](img/b.png \"title\").\n`[c](c.md)` is code\n```\n[d](d.md)\n```\n[e](https://x.example/e) [f](#f)\n"
	var got []string
	for _, l := range links(page) {
		got = append(got, l.target+"@"+strconv.Itoa(l.line))
	}
	want := "a.md@1 img/b.png@1 https://x.example/e@6 #f@6"
	if strings.Join(got, " ") != want {
		t.Errorf("links = %q; want %q", strings.Join(got, " "), want)
	}
}

type link struct {
	target string
	line   int
}

var (
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE = regexp.MustCompile("`[^`]*`")
)

// links returns the inline links and images of a Markdown page, outside
// code blocks and code spans.
func links(page string) []link {
	var out []link
	inFence := false
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			out = append(out, link{target: m[1], line: i + 1})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped but for - and _, spaces as -, and -1,
// -2, ... after a repeat.
func headingAnchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inFence || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		text = linkRE.ReplaceAllStringFunc(text, func(l string) string { // a link's text only
			return l[strings.IndexByte(l, '[')+1 : strings.IndexByte(l, ']')]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func isAbsolute(target string) bool {
	i := strings.Index(target, ":")
	return i > 0 && !strings.ContainsAny(target[:i], "/.#")
}
