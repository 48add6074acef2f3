package relay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/molecule-ai/molecule-relay"

// The public packages: what a program outside the module may import.
var publicPackages = []string{module, module + "/pkg/molecule", module + "/pkg/molecule/moleculetest", module + "/pkg/events"}

// knownLeaks are the exported identifiers of the public packages whose
// signatures may still name an internal type ("pkg/events.X names
// internal/y.Z"); none today. The test fails on any other, and on an
// entry that no longer leaks (remove it).
var knownLeaks = []string{}

// No exported identifier of a public package names an internal type in
// its signature: a caller could not name it, and an internal package
// would become part of the public API by accident.
func TestPublicSignaturesNameNoInternalType(t *testing.T) {
	pkgs := loadExported(t, publicPackages...)
	var found []string
	for _, path := range publicPackages {
		api := exportedAPI(pkgs[path])
		t.Logf("%s: %d exported identifiers (%d top-level)", path, len(api), topLevel(api))
		for _, a := range api {
			for _, leak := range internalTypes(a.typ) {
				found = append(found, fmt.Sprintf("%s.%s names %s", strings.TrimPrefix(path, module+"/"), a.name, leak))
			}
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	for _, f := range found {
		if !slices.Contains(knownLeaks, f) {
			t.Errorf("%s: an internal type in a public signature", f)
		}
	}
	for _, k := range knownLeaks {
		if !slices.Contains(found, k) {
			t.Errorf("%s no longer leaks: remove it from knownLeaks", k)
		}
	}
}

// The check finds an internal type behind an alias, a pointer, a slice, a
// function's parameters and a struct's exported field, and ignores
// unexported fields: run on internal/relay, whose Runtime exposes its
// internal stage types.
func TestPublicSignatureCheckFindsInternalTypes(t *testing.T) {
	path := module + "/internal/relay"
	pkg := loadExported(t, path)[path]
	var found []string
	for _, a := range exportedAPI(pkg) {
		for _, leak := range internalTypes(a.typ) {
			found = append(found, a.name+" names "+leak)
		}
	}
	// An alias of an internal type, as a public package could declare it.
	public := types.NewPackage(module+"/pkg/leaky", "leaky")
	alias := types.NewAlias(types.NewTypeName(token.NoPos, public, "Runtime", nil), pkg.Scope().Lookup("Runtime").Type())
	for _, leak := range internalTypes(types.NewSlice(alias)) {
		found = append(found, "leaky.Runtime names "+leak)
	}
	for _, want := range []string{
		"leaky.Runtime names internal/relay.Runtime",              // an alias
		"Runtime.Conn names internal/broker.Conn",                 // a field, through a pointer
		"Runtime.Dispatcher names internal/handler.Handler",       // a parameter
		"Runtime.Dispatcher names internal/dispatcher.Dispatcher", // a result
		"PrintFailures names internal/relay.Failure",              // a slice
	} {
		if !slices.Contains(found, want) {
			t.Errorf("not found: %s (found %q)", want, found)
		}
	}
	for _, f := range found {
		if strings.HasPrefix(f, "Runtime.stages ") || strings.HasPrefix(f, "Runtime.agentSrv ") {
			t.Errorf("an unexported field reported: %s", f)
		}
	}
}

// apiEntry is one exported identifier: a top-level name, or a method or
// field of an exported type ("Type.Name"), with its type.
type apiEntry struct {
	name string
	typ  types.Type
}

// exportedAPI lists pkg's exported identifiers: its exported top-level
// names, and the exported methods and struct fields of its exported types.
func exportedAPI(pkg *types.Package) []apiEntry {
	var out []apiEntry
	for _, name := range pkg.Scope().Names() {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		tn, ok := obj.(*types.TypeName)
		if !ok {
			out = append(out, apiEntry{name, obj.Type()})
			continue
		}
		if tn.IsAlias() {
			out = append(out, apiEntry{name, obj.Type()})
			continue
		}
		named := tn.Type().(*types.Named)
		switch u := named.Underlying().(type) {
		case *types.Struct:
			for f := range u.Fields() {
				if f.Exported() {
					out = append(out, apiEntry{name + "." + f.Name(), f.Type()})
				}
			}
			out = append(out, apiEntry{name, types.NewStruct(nil, nil)}) // the type itself
		default:
			out = append(out, apiEntry{name, u})
		}
		for m := range types.NewMethodSet(types.NewPointer(named)).Methods() {
			if m.Obj().Exported() {
				out = append(out, apiEntry{name + "." + m.Obj().Name(), m.Type()})
			}
		}
	}
	return out
}

// internalTypes are the internal packages' types t names, as
// "internal/pkg.Type", each once.
func internalTypes(t types.Type) []string {
	var out []string
	seen := map[types.Type]bool{}
	var walk func(types.Type)
	walk = func(t types.Type) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Alias:
			if isInternal(t.Obj().Pkg()) {
				out = append(out, qualified(t.Obj()))
			}
			walk(types.Unalias(t))
		case *types.Named:
			if isInternal(t.Obj().Pkg()) {
				out = append(out, qualified(t.Obj()))
			}
			for a := range t.TypeArgs().Types() {
				walk(a)
			}
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Signature:
			for v := range t.Params().Variables() {
				walk(v.Type())
			}
			for v := range t.Results().Variables() {
				walk(v.Type())
			}
		case *types.Struct:
			for f := range t.Fields() {
				if f.Exported() {
					walk(f.Type())
				}
			}
		case *types.Interface:
			for m := range t.Methods() {
				if m.Exported() {
					walk(m.Type())
				}
			}
			for e := range t.EmbeddedTypes() {
				walk(e)
			}
		}
	}
	walk(t)
	slices.Sort(out)
	return slices.Compact(out)
}

// topLevel counts the entries that are not a method or a field.
func topLevel(api []apiEntry) int {
	n := 0
	for _, a := range api {
		if !strings.Contains(a.name, ".") {
			n++
		}
	}
	return n
}

func isInternal(p *types.Package) bool {
	return p != nil && strings.Contains(p.Path()+"/", "/internal/")
}

func qualified(obj types.Object) string {
	return strings.TrimPrefix(obj.Pkg().Path(), module+"/") + "." + obj.Name()
}

// loadExported type-checks paths from the compiler's export data (go list
// -export): the API exactly as an importer sees it.
func loadExported(t *testing.T, paths ...string) map[string]*types.Package {
	t.Helper()
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	pkgs := map[string]*types.Package{}
	for _, p := range paths {
		pkg, err := imp.Import(p)
		if err != nil {
			t.Fatalf("import %s: %v", p, err)
		}
		pkgs[p] = pkg
	}
	return pkgs
}
