package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// What the envelope encoder tests share: an envelope's Marshal is written
// by hand and must be byte for byte what json.Marshal writes (with the
// current Version), its error too, also for the envelopes it leaves to
// json.Marshal.

type marshaler interface{ Marshal() ([]byte, error) }

// fixtures decodes testdata/<name>.json, for each name, into a T.
func fixtures[T any](t testing.TB, names ...string) []T {
	t.Helper()
	var out []T
	for _, name := range names {
		data, err := os.ReadFile("testdata/" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// checkEncodesLikeJSON fails t unless v.Marshal() is json.Marshal of
// stamped (v with the current Version), output and error alike.
func checkEncodesLikeJSON[T marshaler](t *testing.T, what string, i int, v, stamped T) {
	t.Helper()
	got, gotErr := v.Marshal()
	want, wantErr := json.Marshal(stamped)
	if (gotErr == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Errorf("%s %d: Marshal = %s, %v\njson.Marshal = %s, %v", what, i, got, gotErr, want, wantErr)
	}
}

// benchmarkMarshal runs each fixture (named by names) through Marshal and
// through json.Marshal.
func benchmarkMarshal[T marshaler](b *testing.B, names []string, vs []T) {
	for i, v := range vs {
		b.Run(names[i]+"/json.Marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = json.Marshal(v)
			}
		})
		b.Run(names[i]+"/Marshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = v.Marshal()
			}
		})
	}
}
