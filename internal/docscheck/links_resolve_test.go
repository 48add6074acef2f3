package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink  = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// withoutCode drops fenced code blocks and inline code, where a bracket
// is not a link.
func withoutCode(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors are the fragments GitHub gives a page's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeated one suffixed -1, -2.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range withoutCode(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Every relative link of docs/*.md and the README leads somewhere: the
// file is in the repository and, for a page's #fragment, the page has
// that heading.
func TestDocsLinksResolve(t *testing.T) {
	dir := root(t)
	inline := regexp.MustCompile("`[^`]*`")
	for _, doc := range documents(t, dir) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range withoutCode(string(text)) {
			line = inline.ReplaceAllString(line, "")
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
				}
				rel, _ := filepath.Rel(dir, doc)
				page, err := os.ReadFile(path)
				if err != nil {
					if info, serr := os.Stat(path); serr == nil && info.IsDir() && frag == "" {
						continue
					}
					t.Errorf("%s links to %s, which is not in the repository", rel, m[1])
					continue
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(string(page))[frag] {
					t.Errorf("%s links to %s: %s has no heading with the anchor #%s", rel, m[1], filepath.Base(path), frag)
				}
			}
		}
	}
}
