package events_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The public packages (pkg/...) are the bottom of the house: the stage
// contract and the platform client a program or a stage in another
// language builds on. None may import an internal package, which a caller
// outside this module could neither name nor replace (issue 38). Test
// files may: they use the embedded server's helpers.
func TestPublicPackagesImportNothingInternal(t *testing.T) {
	const internal = "github.com/molecule-ai/molecule-relay/internal"
	checked := 0
	err := filepath.WalkDir("..", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		p, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		} else if err != nil {
			return err
		}
		checked++
		for _, imp := range p.Imports {
			if imp == internal || strings.HasPrefix(imp, internal+"/") {
				t.Errorf("pkg/%s imports %s: a public package must import nothing internal", filepath.ToSlash(dir[3:]), imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 3 { // events, molecule, molecule/moleculetest
		t.Fatalf("checked %d packages under pkg/: the walk did not find them", checked)
	}
}
