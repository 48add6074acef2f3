package molecule_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// params.metadata.history is the sender's business: whatever shape it
// has, the row is parsed and only well-formed entries are kept.
func TestPlatformHistoryParsedTolerantly(t *testing.T) {
	const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"
	for _, tc := range []struct {
		name, metadata string
		want           []molecule.HistoryTurn
	}{
		{"absent", `{}`, nil},
		{"null", `{"history":null}`, nil},
		{"not a list", `{"history":"oops"}`, nil},
		{"metadata not an object", `"oops"`, nil},
		{"canvas shape", `{"history":[{"role":"user","parts":[{"kind":"text","text":"a"},{"kind":"file","file":{"uri":"x"}},{"kind":"text","text":"b"}]},{"role":"agent","parts":[{"type":"text","text":"c"}]}]}`,
			[]molecule.HistoryTurn{{Role: "user", Text: "ab"}, {Role: "agent", Text: "c"}}},
		{"chat shape", `{"history":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`,
			[]molecule.HistoryTurn{{Role: "user", Text: "q"}, {Role: "agent", Text: "a"}}},
		{"bad entries skipped", `{"history":[42,null,"x",{"role":"system","content":"s"},{"role":7},{"role":"user"},{"role":"user","parts":"x"},{"role":"user","parts":[1,{"kind":"text","text":5}]},{"role":"agent","text":"kept"}]}`,
			[]molecule.HistoryTurn{{Role: "agent", Text: "kept"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := fmt.Sprintf(`{"id":"3b5d7f9a-1c2e-4f4a-b6c8-0d2e4f6a8b91","workspace_id":%q,"activity_type":"a2a_receive","method":"message/send","source_id":null,"created_at":"2026-11-21T17:30:02Z",`+
				`"request_body":{"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"now"}]},"metadata":%s}}}`, ws, tc.metadata)
			m, err := molecule.ParseRow([]byte(row), ws)
			if err != nil {
				t.Fatalf("ParseRow: %v", err)
			}
			if m.Text != "now" || !reflect.DeepEqual(m.History, tc.want) {
				t.Errorf("text %q history %+v, want \"now\" %+v", m.Text, m.History, tc.want)
			}
		})
	}
}
