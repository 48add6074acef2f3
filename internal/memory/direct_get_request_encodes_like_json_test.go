package memory

import (
	"encoding/json"
	"testing"
)

// The batched direct get's request body is written by hand and must be
// what json.Marshal writes for it.
func TestDirectGetRequestEncodesLikeJSON(t *testing.T) {
	for _, r := range []directGetRequest{
		{},
		{NextFor: "molecule.memory.ws.canvas", Batch: 20, NoHeaders: true},
		{Seq: 18446744073709551615, NextFor: "molecule.memory.ws.peer-<1>&\"x\"", Batch: -1},
		{Seq: 7, NextFor: "molecule.memory.é.\u2028\xff", Batch: 256, NoHeaders: true},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.marshal(); string(got) != string(want) {
			t.Errorf("marshal = %s, json.Marshal = %s", got, want)
		}
	}
}

// BenchmarkDirectGetRequest: a read's request body, by hand and by
// json.Marshal.
func BenchmarkDirectGetRequest(b *testing.B) {
	r := directGetRequest{Seq: 1234, NextFor: "molecule.memory.35637291-d55e-4553-896c-13c2e02fe4f7.canvas", Batch: 20, NoHeaders: true}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.marshal()
		}
	})
}
