package poller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// cursorValue.marshal writes the bytes json.Marshal writes, including the
// values it hands to json.Marshal (escapes, refused times).
func TestCursorEncodesLikeJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 11, 30, 0, 123456789, time.UTC)
	big := map[string]int64{}
	for i := range maxRecent {
		big[fmt.Sprintf("7f3c9a10-0000-4000-8000-%012d", i*7919%maxRecent)] = at.UnixMicro() - int64(i)
	}
	for _, v := range []cursorValue{
		{},
		{UpdatedAt: at},
		{Cursor: "act-9", CreatedAt: at.Add(-time.Second), UpdatedAt: at, Generation: "g1", Floor: at.Add(-time.Hour), FloorID: "act-1",
			Recent: map[string]int64{"act-9": 3, "act-10": -1, "act-1": 1 << 60}},
		{Cursor: "act-9", UpdatedAt: at, Recent: big},
		{Cursor: "act-9", UpdatedAt: at, Recent: map[string]int64{}},
		{Cursor: `odd "cursor" <&>`, UpdatedAt: at.In(time.FixedZone("x", -3600))},
		{Cursor: "act-9", UpdatedAt: at, Recent: map[string]int64{"é\u2028": 2, "plain": 1}},
		{Cursor: "act-9", UpdatedAt: at.AddDate(9000, 0, 0)},
	} {
		got, gerr := v.marshal()
		want, werr := json.Marshal(v)
		if string(got) != string(want) || (gerr == nil) != (werr == nil) {
			t.Errorf("marshal = %.300s, %v\njson.Marshal = %.300s, %v", got, gerr, want, werr)
		}
	}
}

func BenchmarkCursorMarshal(b *testing.B) {
	v := cursorValue{Cursor: "act-9", UpdatedAt: time.Now(), Recent: map[string]int64{}}
	for i := range maxRecent {
		v.Recent[fmt.Sprintf("7f3c9a10-0000-4000-8000-%012d", i)] = int64(i)
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(v)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = v.marshal()
		}
	})
}
