package molecule

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkActivityPageRead measures what Activity does with a page's
// body once it has it, for a page of 100 rows shaped like the platform's
// (half messages, half own notifies), none of them parsed: a re-read's
// page, whose rows the poller drops as already published. Figures are per
// row. "hand" is readPage (internal/jsonread's one-pass scan); "encodingjson"
// is the same reading with encoding/json (a []json.RawMessage, then a
// map[string]json.RawMessage per row), which the package replaced: with
// it, the page and row reading were 8.5 % of the relay's CPU on the
// shipped defaults (echo/d1, store sync always) against 0.8 % by hand
// (CPU profiles of BenchmarkPipeline -window-cpuprofile, 2026-12-02).
func BenchmarkActivityPageRead(b *testing.B) {
	body := benchActivityPage(100)
	for _, v := range []struct {
		name string
		read func(*testing.B, []byte) []ActivityRow
	}{{"hand", readActivityPage}, {"encodingjson", readActivityPageByEncodingJSON}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if rows := v.read(b, body); len(rows) != 100 {
					b.Fatalf("%d rows", len(rows))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/row")
		})
	}
}

// readActivityPageByEncodingJSON is readActivityPage with encoding/json.
func readActivityPageByEncodingJSON(b *testing.B, body []byte) []ActivityRow {
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		b.Fatal(err)
	}
	rows := make([]ActivityRow, len(raws))
	for i, raw := range raws {
		var o map[string]json.RawMessage
		if err := json.Unmarshal(raw, &o); err != nil {
			b.Fatal(err)
		}
		str := func(key string) string {
			var s string
			_ = json.Unmarshal(o[key], &s)
			return s
		}
		rows[i] = ActivityRow{ID: str("id"), Method: str("method"), JSON: raw, valid: true}
		rows[i].CreatedAt, _ = time.Parse(time.RFC3339Nano, str("created_at"))
	}
	orderRows(rows)
	return rows
}

// readActivityPage is Activity's reading of a body, without the HTTP.
func readActivityPage(b *testing.B, body []byte) []ActivityRow {
	rows, err := readPage(request{method: "GET", path: "/activity"}, body, 100)
	if err != nil {
		b.Fatal(err)
	}
	orderRows(rows)
	return rows
}

func benchActivityPage(n int) []byte {
	const ws = "35637291-d55e-4553-896c-13c2e02fe4f7"
	base := time.Date(2026, 11, 21, 17, 25, 36, 0, time.UTC)
	rows := make([]string, n)
	for i := range rows {
		at := base.Add(time.Duration(n-i) * 1537 * time.Microsecond).Format(time.RFC3339Nano) // newest first, as since_secs answers
		if i%2 == 1 {
			rows[i] = fmt.Sprintf(`{"activity_type":"a2a_receive","created_at":%q,"duration_ms":null,"error_detail":null,`+
				`"id":"6af0b425-9c93-48bf-ac04-%012d","method":"notify","response_body":{"result":"echo: hello from canvas %d"},`+
				`"source_id":null,"status":"ok","summary":"Agent message: echo: hello from canvas %d","target_id":null,"workspace_id":%q}`,
				at, i, i, i, ws)
			continue
		}
		rows[i] = fmt.Sprintf(`{"activity_type":"a2a_receive","created_at":%q,"duration_ms":null,"error_detail":null,`+
			`"id":"6af0b425-9c93-48bf-ac04-%012d","method":"message/send","request_body":{"id":"1f6b5d85-3c2a-4e71-9d0b-8a4f2e6c1b37","method":"message/send",`+
			`"params":{"message":{"role":"user","parts":[{"kind":"text","text":"hello from canvas %d"}],"messageId":"m-%d"},"metadata":{"history":[]}},"jsonrpc":"2.0"},`+
			`"source_id":null,"status":"ok","summary":"message/send → ext-A (queued for poll)","target_id":%q,"workspace_id":%q}`,
			at, i, i, i, ws, ws)
	}
	return []byte("[" + strings.Join(rows, ",") + "]")
}
