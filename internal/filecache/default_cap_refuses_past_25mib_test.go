package filecache_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDefaultCapRefusesPast25MiB: with the default cap a file of 25 MiB is
// held and one byte more is refused with the reason, not fetched whole
// and not acked (the platform keeps it for a raised cap).
func TestDefaultCapRefusesPast25MiB(t *testing.T) {
	f := newFixture(t)
	at := f.s.StageUpload(f.w.ID, "at.bin", "", bytes.Repeat([]byte("a"), 25<<20))
	over := f.s.StageUpload(f.w.ID, "over.bin", "", bytes.Repeat([]byte("o"), 25<<20+1))
	start := time.Now()
	got, _ := f.cache.Fetch(context.Background(), f.message(attachment(at), attachment(over)))
	took := time.Since(start)
	if got[0].Error != "" || got[0].Size != 25<<20 {
		t.Fatalf("25 MiB: %+v, want held", got[0])
	}
	if !strings.HasPrefix(got[1].Error, "too large: over the relay's cap of 26214400 bytes") || got[1].Path != "" {
		t.Fatalf("25 MiB + 1: %+v, want refused naming the cap", got[1])
	}
	if st, _ := f.s.StagedUpload(over.FileID); st.Acked {
		t.Fatal("the refused upload was acked")
	}
	t.Logf("held 26214400 bytes and refused 26214401 in %v", took)
}
