package molecule

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkActivityPageRead measures what Activity does with a page's
// body once it has it, for a page of 100 rows shaped like the platform's
// (half messages, half own notifies), none of them parsed: a re-read's
// page, whose rows the poller drops as already published. Figures are per
// row.
func BenchmarkActivityPageRead(b *testing.B) {
	body := benchActivityPage(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rows := readActivityPage(b, body)
		if len(rows) != 100 {
			b.Fatalf("%d rows", len(rows))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/row")
}

// readActivityPage is Activity's reading of a body, without the HTTP.
func readActivityPage(b *testing.B, body []byte) []ActivityRow {
	rows, err := readPage(request{method: "GET", path: "/activity"}, body)
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
