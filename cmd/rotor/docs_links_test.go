package main

// README.md and docs/ link to each other's pages and headings; a renamed
// page or heading must not leave a link to nowhere.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	mdFence    = regexp.MustCompile("^\\s*(```|~~~)")
	mdCodeSpan = regexp.MustCompile("`+[^`]*`+")
	mdLink     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	mdHeading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// markdownLines are the lines of a markdown file, those of fenced code
// blocks (fences included) blanked, so that index i is line i+1.
func markdownLines(text string) []string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		if mdFence.MatchString(line) {
			inFence = !inFence
			lines[i] = ""
		} else if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// githubSlug is the anchor GitHub gives a heading: its text (links by their
// text, code spans by their content) in lower case, with spaces turned to
// '-' and every other character but letters, digits, '-' and '_' dropped.
func githubSlug(heading string) string {
	heading = mdLinkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingAnchors are the anchors of a markdown file's headings, with
// GitHub's -1, -2 … for a heading that repeats an earlier one.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdownLines(text) {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[2])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func TestGitHubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"How rotor picks an account":                           "how-rotor-picks-an-account",
		"When a session's account runs out":                    "when-a-sessions-account-runs-out",
		"`rotor verify-flagged`":                               "rotor-verify-flagged",
		"Credits, models with limits of their own, workspaces": "credits-models-with-limits-of-their-own-workspaces",
		"Signing in: `rotor login`":                            "signing-in-rotor-login",
		"See [the page](x.md) now":                             "see-the-page-now",
		"Codex CLI's login: `rotor import codex`":              "codex-clis-login-rotor-import-codex",
		"§15 snake_case and 2.0 (beta)":                        "15-snake_case-and-20-beta",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := headingAnchors("# A\n## B\n```\n# not a heading\n```\n## B\n")
	if !a["a"] || !a["b"] || !a["b-1"] || a["not-a-heading"] || len(a) != 3 {
		t.Errorf("headingAnchors = %v", a)
	}
}

// Every relative link in README.md and docs/*.md names a file that exists,
// and every #anchor a heading of the page it points at.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchorsOf[path] = headingAnchors(string(text))
		return anchorsOf[path], nil
	}
	links := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(page), "../../")
		for i, line := range markdownLines(string(text)) {
			line = mdCodeSpan.ReplaceAllString(line, "code")
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s (line %d): link %s: no file %s", name, i+1, target, file)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				a, err := anchors(path)
				if err != nil {
					t.Errorf("%s: link %s: %v", name, target, err)
				} else if !a[anchor] {
					t.Errorf("%s (line %d): link %s: no heading with anchor #%s", name, i+1, target, anchor)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("only %d relative links found in README.md and docs/: is the link pattern still right?", links)
	}
}
