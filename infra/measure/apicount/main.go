// apicount: exported identifiers of a module's public packages (not internal,
// not main, not examples/bench): top-level exported names plus exported
// methods, counted from the non-test sources.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := os.Args[1]
	total, pkgs := 0, 0
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			if part == "internal" || part == "testdata" || strings.HasPrefix(part, ".") && part != "." || part == "examples" || part == "bench" || part == "cmd" || part == "functions" || part == "infra" || part == "docs" || part == "bin" {
				return filepath.SkipDir
			}
		}
		fs := token.NewFileSet()
		m, _ := parser.ParseDir(fs, p, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		for name, pkg := range m {
			if name == "main" {
				continue
			}
			n := 0
			for _, f := range pkg.Files {
				for _, decl := range f.Decls {
					switch d := decl.(type) {
					case *ast.FuncDecl:
						if !d.Name.IsExported() {
							continue
						}
						if d.Recv != nil {
							t := d.Recv.List[0].Type
							if s, ok := t.(*ast.StarExpr); ok {
								t = s.X
							}
							if ix, ok := t.(*ast.IndexExpr); ok {
								t = ix.X
							}
							if id, ok := t.(*ast.Ident); ok && !id.IsExported() {
								continue
							}
						}
						n++
					case *ast.GenDecl:
						for _, s := range d.Specs {
							switch s := s.(type) {
							case *ast.TypeSpec:
								if s.Name.IsExported() {
									n++
								}
							case *ast.ValueSpec:
								for _, id := range s.Names {
									if id.IsExported() {
										n++
									}
								}
							}
						}
					}
				}
			}
			if n > 0 {
				pkgs++
				total += n
				fmt.Printf("%5d %s\n", n, rel)
			}
		}
		return nil
	})
	fmt.Printf("%d identifiers in %d packages\n", total, pkgs)
}
