package molecule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// pageRow reads raw as the one row of a page, as Activity does.
func pageRow(t testing.TB, raw []byte) ActivityRow {
	t.Helper()
	rows, err := readPage(testPageRequest, append(append([]byte("["), raw...), ']'), 1)
	if err != nil || len(rows) != 1 {
		t.Fatalf("page of %s: %d rows, %v", raw, len(rows), err)
	}
	return rows[0]
}

var testPageRequest = request{method: "GET", path: "/workspaces/ws-self/activity"}

// encodingJSONRow is a row as Activity read it before the one-pass
// reader: the page through encoding/json, then id, method and created_at
// read from the row's members with the last duplicate winning.
func encodingJSONRow(raw json.RawMessage) ActivityRow {
	row := ActivityRow{JSON: raw}
	if jsonKind(raw) != '{' {
		return row
	}
	obj := splitObject(raw)
	row.ID, row.Method = obj.lenientStr("id"), obj.lenientStr("method")
	if v, ok := obj.get("seq"); ok {
		row.Seq = seqValue(v)
	}
	if t, err := time.Parse(time.RFC3339Nano, obj.lenientStr("created_at")); err == nil {
		row.CreatedAt = t
	}
	return row
}

// checkPageMatchesEncodingJSON: readPage gives the rows encoding/json
// gives, with the same id, method and created_at, or the error of
// encoding/json's reading of the body.
func checkPageMatchesEncodingJSON(t *testing.T, body []byte) {
	t.Helper()
	rows, err := readPage(testPageRequest, body, MaxActivityLimit)
	var raws []json.RawMessage
	if uerr := json.Unmarshal(body, &raws); uerr != nil {
		want := decodeJSON(testPageRequest, body, &raws)
		if err == nil || err.Error() != want.Error() {
			t.Fatalf("page %q: error %v, want %v", body, err, want)
		}
		return
	}
	if raws == nil {
		if err == nil || !strings.Contains(err.Error(), "not a JSON array") {
			t.Fatalf("page %q: error %v, want not a JSON array", body, err)
		}
		return
	}
	if err != nil || len(rows) != len(raws) {
		t.Fatalf("page %q: %d rows, %v; encoding/json %d rows", body, len(rows), err, len(raws))
	}
	for i, raw := range raws {
		want, got := encodingJSONRow(raw), rows[i]
		if !bytes.Equal(got.JSON, want.JSON) || got.ID != want.ID || got.Method != want.Method || got.CreatedAt != want.CreatedAt || got.Seq != want.Seq {
			t.Fatalf("page %q row %d:\n got  %q %q %v %s\n want %q %q %v %s", body, i,
				got.ID, got.Method, got.CreatedAt, got.JSON, want.ID, want.Method, want.CreatedAt, want.JSON)
		}
	}
}

// pageCases: the row fixtures and rows whose id, method or created_at
// are awkward, alone and together, and pages that are not valid.
func pageCases(t testing.TB) [][]byte {
	rows := splitCases(t)
	for _, s := range []string{
		`{"id":"a","id":5}`, `{"id":5,"id":"a"}`, `{"id":null}`, `{"\u0069d":"esc-key","m\u0065thod":"notify"}`,
		`{"id":"\u00e9t\u00e9","method":"no\u0074ify"}`, "{\"id\":\"\xff\xfe\",\"method\":\"caf\xc3\xa9\"}",
		`{"id":"a","created_at":"2026-11-21T17:25:36.745773Z"}`, `{"id":"a","created_at":"2026-11-21T17:25:36+02:00"}`,
		`{"id":"a","created_at":"2026-11-21T17:25:36.1234567891Z"}`, `{"id":"a","created_at":"yesterday"}`,
		`{"id":"a","seq":41}`, `{"id":"a","seq":41,"seq":42}`, `{"id":"a","seq":"41"}`, `{"id":"a","seq":-1}`, `{"id":"a","seq":4.5}`, `{"id":"a","seq":99999999999999999999}`,
		`{"id":"a","created_at":"2026-11-21T17:25:36Z","created_at":5}`, `{"id":"a","created_at":"\u0032026-11-21T17:25:36Z"}`,
		`{"id":"a","created_at":"2026-02-30T00:00:00Z"}`, `{"id":"","method":""}`, `42`, `"row"`, `null`, `[{"id":"nested"}]`,
		`{"x":{"id":"inner","method":"notify"},"id":"outer"}`,
	} {
		rows = append(rows, []byte(s))
	}
	pages := [][]byte{
		[]byte(`[]`), []byte(` [ ] `), []byte(`null`), []byte(`{"rows":[]}`), []byte(`<html>canvas</html>`), []byte(``),
		[]byte(`[{"id":"a"}`), []byte(`[{"id":"a"},]`), []byte(`[{"id":"a"}] x`), []byte(`[{"id":"a","b":}]`),
		[]byte("[{\"id\":\"a\x01\"}]"), []byte(`"[]"`),
	}
	for _, r := range rows {
		pages = append(pages, append(append([]byte("["), r...), ']'))
	}
	pages = append(pages, append(append([]byte("[ "), bytes.Join(rows, []byte(" ,\n"))...), ']'))
	return pages
}

// TestPageRowsMatchEncodingJSON: the one-pass page reader reads every
// case as encoding/json did, and a malformed page gets the error it got.
func TestPageRowsMatchEncodingJSON(t *testing.T) {
	for _, page := range pageCases(t) {
		checkPageMatchesEncodingJSON(t, page)
	}
}

// FuzzPageRowsMatchEncodingJSON is TestPageRowsMatchEncodingJSON for any
// body.
func FuzzPageRowsMatchEncodingJSON(f *testing.F) {
	for _, page := range pageCases(f) {
		f.Add(page)
	}
	f.Fuzz(checkPageMatchesEncodingJSON)
}

// TestPageRowsCostAllocationsPerPageNotPerRow: a page's rows, ids,
// methods and times cost a fixed number of allocations, whatever the
// number of rows: the rows, the ids and methods' shared string, and past
// 32 rows the list of rows read.
func TestPageRowsCostAllocationsPerPageNotPerRow(t *testing.T) {
	page := func(n int) []byte {
		var rows []string
		for i := range n {
			rows = append(rows, fmt.Sprintf(`{"activity_type":"a2a_receive","created_at":"2026-11-21T17:25:36.%06dZ","duration_ms":null,"error_detail":null,`+
				`"id":"6af0b425-9c93-48bf-ac04-%012d","method":"notify","response_body":{"result":"echo %d"},"source_id":null,"status":"ok",`+
				`"summary":"Agent message: echo %d","target_id":null,"workspace_id":"35637291-d55e-4553-896c-13c2e02fe4f7"}`, i, i, i, i))
		}
		return []byte("[" + strings.Join(rows, ",") + "]")
	}
	for _, n := range []int{1, 10, 100} {
		body := page(n)
		allocs := testing.AllocsPerRun(20, func() {
			if rows, err := readPage(testPageRequest, body, n); err != nil || len(rows) != n {
				t.Fatalf("%d rows, %v", len(rows), err)
			}
		})
		if allocs > 3 {
			t.Errorf("a page of %d rows: %v allocations, want at most 3", n, allocs)
		}
	}
}
