package poller_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A status record the bucket refuses to store is the cycle's bookkeeping,
// not its work: the message is published, the cycle is no failed poll
// (a --once run would otherwise fail for a poll that worked), and a
// warning says what was not saved.
func TestStatusWriteFailureDoesNotFailThePoll(t *testing.T) {
	e := newEnv(t)
	var logs pipelinetest.LogBuffer
	p := e.poller(poller.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	e.runOnce(p) // registers, and records the registration (that write must land: the seed needs it)
	// A failed feed read leaves its error in the status record, so that
	// the next cycle, which clears it, has a record to write.
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.ws.ID + "/activity", Status: 500, Count: 1})
	if res, err := p.RunOnce(ctx(t)); err != nil || res.Err() == nil {
		t.Fatalf("the cycle with a failed feed read reported %v, %v; want its failure", err, res.Err())
	}
	e.sendCanvas(e.ws.ID, "hello")

	// Every status record is larger than 16 bytes: the bucket refuses
	// each write, and only its writes (the cursor has a bucket of its own).
	stream, err := e.js.Stream(ctx(t), "KV_"+e.topo.Status.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 16
	if _, err := e.js.UpdateStream(ctx(t), cfg); err != nil {
		t.Fatal(err)
	}

	before := len(logs.String())
	res := e.runOnce(p) // fails the test if the cycle reports an error
	if res.Published != 1 {
		t.Fatalf("published %d, want 1", res.Published)
	}
	if got := len(e.inbound()); got != 1 {
		t.Fatalf("inbound stream holds %d messages, want 1", got)
	}
	out := logs.String()[before:] // this cycle's lines
	if !strings.Contains(out, "status record not saved") {
		t.Fatalf("no warning that the status record was not saved; log:\n%s", out)
	}
	if strings.Contains(out, "poll failed") {
		t.Fatalf("a poll that published its message was logged as failed:\n%s", out)
	}
}
