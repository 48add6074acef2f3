package poller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCursorSave is the cursor record's encoding as saveCursor does
// it, once per delivered page, with as many recent ids as it carries:
// none (every id in a snapshot), a quiet workspace's few, the ids
// snapshotRows lets wait, and maxRecent (snapshots failing).
func BenchmarkCursorSave(b *testing.B) {
	at := time.Date(2026, 11, 25, 11, 30, 0, 123456789, time.UTC)
	for _, n := range []int{0, 10, snapshotRows, maxRecent} {
		v := cursorValue{Cursor: "7f3c9a10-0000-4000-8000-000000000001", CreatedAt: at, Seq: 123456, UpdatedAt: at, Generation: "new", Recent: map[string]int64{}}
		for i := range n {
			v.Recent[fmt.Sprintf("7f3c9a10-0000-4000-8000-%012d", i)] = at.UnixMicro() - int64(i)
		}
		b.Run(fmt.Sprintf("recent=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
