package config_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/testkit/gendoc"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/configuration.md")

const (
	configDoc = "../../docs/configuration.md"
	// configMark starts the part of the document written by this test.
	configMark = "<!-- Generated from internal/config by TestConfigurationDocIsCurrent; do not edit below. -->"
)

// docs/configuration.md, the reference of every setting, is generated
// below its mark from config.Config: each variable's name, flag, default
// and the doc comment of its field. The test fails when a setting was
// added or changed and the page was not regenerated
// (go test ./internal/config -run TestConfigurationDocIsCurrent -update).
func TestConfigurationDocIsCurrent(t *testing.T) {
	gendoc.Check(t, configDoc, configMark, generateReference(t), *update, "go test ./internal/config -run TestConfigurationDocIsCurrent -update")
}

// fieldDocs maps "package.Type.Field" to the field's doc comment, for the structs
// of the given package directories. A field without a comment of its own
// takes the one of the field just above it (WorkspaceID and
// WorkspaceToken share one).
func fieldDocs(t *testing.T, dirs ...string) map[string]string {
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			pkg := f.Name.Name
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return false
				}
				prev, prevEnd := "", 0
				for _, fld := range st.Fields.List {
					text := fld.Doc.Text()
					line := fset.Position(fld.Pos()).Line
					if text == "" && line == prevEnd+1 {
						text = prev
					}
					for _, name := range fld.Names {
						docs[pkg+"."+ts.Name.Name+"."+name.Name] = text
					}
					prev, prevEnd = text, fset.Position(fld.End()).Line
				}
				return false
			})
		}
	}
	return docs
}

// setting is one environment variable of config.Config.
type setting struct {
	env, def, doc string
	typ, field    string // the struct it is a field of ("config.Config"), and its field
}

// settings walks config.Config in declaration order, into embedded
// structs, as BindFlags does.
func settings(t *testing.T) []setting {
	docs := fieldDocs(t, ".", "../broker")
	loaded, err := config.Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []setting
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if sf.Type.Kind() == reflect.Struct && sf.Tag.Get("env") == "" {
				walk(v.Field(i))
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
			if name == "" {
				continue
			}
			def := sf.Tag.Get("envDefault")
			if f := v.Field(i); def == "" && (!f.IsZero() || f.Kind() == reflect.Bool) {
				def = fmt.Sprint(f.Interface())
			}
			typ := path.Base(v.Type().PkgPath()) + "." + v.Type().Name()
			doc := docs[typ+"."+sf.Name]
			if strings.TrimSpace(doc) == "" {
				t.Errorf("%s (%s.%s) has no doc comment to describe it", name, typ, sf.Name)
			}
			out = append(out, setting{env: name, def: def, doc: doc, typ: typ, field: sf.Name})
		}
	}
	walk(reflect.ValueOf(loaded).Elem())
	return out
}

// generateReference writes the table of every setting and the
// TypeScript channel's names.
func generateReference(t *testing.T) []byte {
	all := settings(t)
	// A comment names the other fields of its struct by their Go names:
	// the reader knows them by their variables.
	envOf := map[string]map[string]string{}
	for _, s := range all {
		if envOf[s.typ] == nil {
			envOf[s.typ] = map[string]string{}
		}
		envOf[s.typ][s.field] = s.env
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n%d settings. Flag: the command-line flag that mirrors the variable.\n\n", len(all))
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range all {
		def := "—"
		if s.def != "" {
			def = "`" + s.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s |\n", s.env, config.FlagName(s.env), def, cell(envNames(withoutName(s.doc, s.field), envOf[s.typ])))
	}
	b.WriteString("\n## The TypeScript channel's names\n\nRead too, each standing for one of the relay's settings; when both names are set they must agree, else the command exits 2 naming both.\n\n")
	b.WriteString("| variable | stands for | meaning |\n|---|---|---|\n")
	for _, c := range config.ChannelSettings {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", c.Name, c.Ours, cell(c.Meaning))
	}
	return []byte(b.String())
}

// withoutName drops the field's own name from the start of its comment
// ("PageLimit is the activity page size" → "The activity page size"): the
// variable is in the row already.
func withoutName(doc, field string) string {
	for _, verb := range []string{" is ", " are ", ": ", " "} {
		if rest, ok := strings.CutPrefix(doc, field+verb); ok && (verb != " " || !strings.HasPrefix(rest, "and ") && !strings.HasPrefix(rest, "of ")) {
			return strings.ToUpper(rest[:1]) + rest[1:]
		}
	}
	return doc
}

var goName = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*\b`)

// envNames writes the fields a comment names as their variables (not a
// qualified Go name such as poller.Config.SafetyNetInterval).
func envNames(doc string, env map[string]string) string {
	var b strings.Builder
	last := 0
	for _, m := range goName.FindAllStringIndex(doc, -1) {
		e, ok := env[doc[m[0]:m[1]]]
		if !ok || m[0] > 0 && doc[m[0]-1] == '.' {
			continue
		}
		b.WriteString(doc[last:m[0]] + "`" + e + "`")
		last = m[1]
	}
	return b.String() + doc[last:]
}

// cell puts a comment on one table line.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
