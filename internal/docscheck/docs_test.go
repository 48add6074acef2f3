// Package docscheck keeps docs/ and the README true to the tree: every test
// they name as pinning a behaviour exists, and every repository path they
// cite is there.
package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	testName = regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`)
	repoPath = regexp.MustCompile("`((?:pkg|cmd|internal|functions|infra|docs|examples|bench)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`")
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// documents are the pages checked: docs/*.md and the README.
func documents(t *testing.T, dir string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	return append(docs, filepath.Join(dir, "README.md"))
}

// testFuncs lists the names of every Test and Fuzz function in the tree.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	names := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestDocsNameTestsThatExist(t *testing.T) {
	dir := root(t)
	funcs := testFuncs(t, dir)
	for _, doc := range documents(t, dir) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range testName.FindAllString(string(text), -1) {
			if !funcs[name] {
				t.Errorf("%s names %s, but no test function has that name", filepath.Base(doc), name)
			}
		}
	}
}

func TestDocsCitePathsThatExist(t *testing.T) {
	dir := root(t)
	for _, doc := range documents(t, dir) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(text), -1) {
			path := m[1]
			if strings.ContainsAny(path, "*<>") {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, path)); err != nil {
				t.Errorf("%s cites %s, which is not in the repository", filepath.Base(doc), path)
			}
		}
	}
}
