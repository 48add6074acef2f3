package events_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/gendoc"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/stage-contract.md")

const (
	contractDoc = "../../docs/stage-contract.md"
	// generatedMark starts the part of the document written by this test.
	generatedMark = "<!-- Generated from pkg/events by TestStageContractDocIsCurrent; do not edit below. -->"
)

// docs/stage-contract.md, the contract a stage in another language
// follows, is generated from this package's code and comments below its
// mark: the test fails when they changed and the document was not
// regenerated (go test ./pkg/events -run TestStageContractDocIsCurrent -update).
func TestStageContractDocIsCurrent(t *testing.T) {
	gendoc.Check(t, contractDoc, generatedMark, generateContract(t), *update, "go test ./pkg/events -run TestStageContractDocIsCurrent -update")
}

// generateContract writes the reference part: every exported constant,
// the streams and consumers, the subjects, ids and keys, and every
// envelope and record with its JSON fields.
func generateContract(t *testing.T) []byte {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/molecule-ai/molecule-relay/pkg/events")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("\n")
	writeConstants(&b, fset, p)
	writeTopology(&b)
	writeNames(t, &b, p)
	writeTypes(&b, p)
	return []byte(b.String())
}

func writeConstants(b *strings.Builder, fset *token.FileSet, p *doc.Package) {
	b.WriteString("\n## Constants\n\nEvery exported constant of `pkg/events`, in its group.\n")
	groups := slices.Clone(p.Consts)
	typeDoc := map[*doc.Value]string{} // a typed group without a comment of its own says what its type is
	for _, typ := range p.Types {
		groups = append(groups, typ.Consts...)
		for _, g := range typ.Consts {
			typeDoc[g] = typ.Doc
		}
	}
	slices.SortFunc(groups, func(a, b *doc.Value) int { return int(a.Decl.Pos() - b.Decl.Pos()) })
	for _, g := range groups {
		fmt.Fprintf(b, "\n%s\n| name | value | meaning |\n|---|---|---|\n", paragraph(g.Doc, typeDoc[g]))
		for _, spec := range g.Decl.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !n.IsExported() || i >= len(vs.Values) {
					continue
				}
				fmt.Fprintf(b, "| `%s` | `%s` | %s |\n", n.Name, source(fset, vs.Values[i]), oneLine(vs.Doc.Text()+vs.Comment.Text()))
			}
		}
	}
}

func writeTopology(b *strings.Builder) {
	var cfg events.TopologyConfig
	cfg.SetDefaults()
	b.WriteString("\n## Streams and consumers\n\nAs `EnsureTopology` creates them with the default `TopologyConfig` (its fields change sizes and times, not names).\n\n")
	b.WriteString("| stream | subjects | retention | duplicate window (`Nats-Msg-Id`) | max age |\n|---|---|---|---|---|\n")
	for _, s := range []jetstream.StreamConfig{events.InboundStreamConfig(cfg), events.ReplyStreamConfig(cfg), events.DLQStreamConfig(cfg), events.MemoryStreamConfig(cfg)} {
		fmt.Fprintf(b, "| `%s` | `%s` | %s | %s | %s |\n", s.Name, strings.Join(s.Subjects, "`, `"), s.Retention, s.Duplicates, orNone(s.MaxAge))
	}
	b.WriteString("\n| durable consumer | stream filter | ack | ack wait | max deliveries |\n|---|---|---|---|---|\n")
	for _, c := range []jetstream.ConsumerConfig{events.DispatcherConsumerConfig(cfg), events.ReplierConsumerConfig(cfg)} {
		fmt.Fprintf(b, "| `%s` | `%s` | %s | %s | %d |\n", c.Durable, c.FilterSubject, c.AckPolicy, c.AckWait, c.MaxDeliver)
	}
}

// names are the package's subjects, message ids and keys, each with an
// example; a new one fails the test until it is listed here.
var names = map[string]string{
	"InboundSubject":          events.InboundSubject("ws-1"),
	"ReplySubject":            events.ReplySubject("ws-1"),
	"DLQSubject":              events.DLQSubject(events.StageReplier, "ws-1"),
	"PollersSubject":          events.PollersSubject("ws-1"),
	"PollGroupMemberSubject":  events.PollGroupMemberSubject("fleet", "poll-1"),
	"MemorySubject":           events.MemorySubject("ws-1", "canvas"),
	"MemoryWorkspaceSubjects": events.MemoryWorkspaceSubjects("ws-1"),
	"InboundMsgID":            events.InboundMsgID("ws-1", "act-1"),
	"ReplyMsgID":              events.ReplyMsgID("ws-1", "act-1"),
	"MemoryMsgID":             events.MemoryMsgID("ws-1", "canvas", "act-1", "user+agent"),
	"ReplyMessageID":          events.ReplyMessageID("act-1"),
	"NameUUID":                events.NameUUID("molecule-relay/reply/act-1"),
	"HandledKey":              events.HandledKey("ws-1", "act-1"),
	"PeerMessageKey":          events.PeerMessageKey("ws-1", "ws-2", "msg-1"),
	"InterimKey":              events.InterimKey("ws-1", "interim-1"),
	"ReplyKey":                events.ReplyKey("ws-1", "act-1"),
	"AskKey":                  events.AskKey("ws-1", "msg-1"),
	"AwaitingKey":             events.AwaitingKey("ws-1", "ws-2"),
	"StreakKey":               events.StreakKey("ws-1", "ws-2"),
	"CancelKey":               events.CancelKey("ws-1", "ws-2", "task-1"),
	"HistoryKey":              events.HistoryKey("ws-1", "canvas"),
}

func writeNames(t *testing.T, b *strings.Builder, p *doc.Package) {
	b.WriteString("\n## Subjects, message ids and keys\n\nThe examples are for workspace `ws-1`, activity `act-1`, peer `ws-2`.\n\n| function | example | meaning |\n|---|---|---|\n")
	for _, f := range p.Funcs {
		if f.Decl.Type.Results == nil || len(f.Decl.Type.Results.List) != 1 || types(f.Decl.Type.Results.List[0].Type) != "string" {
			continue
		}
		ex, ok := names[f.Name]
		if !ok {
			if strings.HasSuffix(f.Name, "Subject") || strings.HasSuffix(f.Name, "Key") || strings.HasSuffix(f.Name, "ID") {
				t.Errorf("%s: a name of the contract without an example: add it to names", f.Name)
			}
			continue
		}
		fmt.Fprintf(b, "| `%s` | `%s` | %s |\n", f.Name, ex, oneLine(f.Doc))
	}
}

func writeTypes(b *strings.Builder, p *doc.Package) {
	b.WriteString("\n## Envelopes and records\n\nEvery JSON type of `pkg/events`: its fields as they are written (optional: omitted when empty).\n")
	for _, typ := range p.Types {
		st, ok := typ.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.StructType)
		if !ok || !hasJSON(st) {
			continue
		}
		fmt.Fprintf(b, "\n### %s\n\n%s\n| field | JSON type | optional | meaning |\n|---|---|---|---|\n", typ.Name, paragraph(typ.Doc, ""))
		for _, f := range st.Fields.List {
			name, opts := jsonTag(f)
			if name == "-" || name == "" {
				continue
			}
			optional := ""
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				optional = "yes"
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, jsonType(f.Type), optional, oneLine(f.Doc.Text()+f.Comment.Text()))
		}
	}
}

func hasJSON(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if n, _ := jsonTag(f); n != "" {
			return true
		}
	}
	return false
}

func jsonTag(f *ast.Field) (name, opts string) {
	if f.Tag == nil {
		return "", ""
	}
	tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("json")
	name, opts, _ = strings.Cut(tag, ",")
	return name, opts
}

// jsonType names the JSON form of a field's Go type.
func jsonType(e ast.Expr) string {
	switch s := types(e); {
	case s == "string", s == "Source":
		return "string"
	case s == "bool":
		return "boolean"
	case s == "int", s == "int64", s == "uint64":
		return "number"
	case s == "time.Time":
		return "string (RFC 3339 time)"
	case s == "json.RawMessage":
		return "any JSON value"
	case strings.HasPrefix(s, "[]"):
		return "array of " + link(strings.TrimPrefix(s, "[]"))
	case strings.HasPrefix(s, "*"):
		return link(strings.TrimPrefix(s, "*")) + " object"
	default:
		return s
	}
}

func link(name string) string {
	if name == "string" {
		return name
	}
	return "[" + name + "](#" + strings.ToLower(name) + ")"
}

// types is a type expression as written.
func types(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return types(e.X) + "." + e.Sel.Name
	case *ast.ArrayType:
		return "[]" + types(e.Elt)
	case *ast.StarExpr:
		return "*" + types(e.X)
	}
	return fmt.Sprintf("%T", e)
}

func source(fset *token.FileSet, e ast.Expr) string {
	file := fset.File(e.Pos())
	src, err := os.ReadFile(file.Name())
	if err != nil {
		return "?"
	}
	return string(src[file.Offset(e.Pos()):file.Offset(e.End())])
}

// paragraph is a doc comment as one paragraph, or def.
func paragraph(text, def string) string {
	if text = oneLine(text); text == "" {
		text = def
	}
	if text == "" {
		return ""
	}
	return text + "\n"
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

func orNone(d interface{ String() string }) string {
	if s := d.String(); s != "0s" {
		return s
	}
	return "none"
}
