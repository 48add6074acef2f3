package poller_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
)

// A negative HeartbeatInterval (the TypeScript channel's
// MOLECULE_HEARTBEAT_INTERVAL_MS=0) sends no heartbeat, in RunOnce and in
// Run, while messages are still polled and published.
func TestNoHeartbeatIsSentWhenTheHeartbeatIsOff(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{HeartbeatInterval: -1})
	if r := e.runOnce(p); r.Heartbeat {
		t.Fatalf("RunOnce sent a heartbeat: %+v", r)
	}
	run(t, p)
	e.sendCanvas(e.ws.ID, "still delivered")
	waitFor(t, 10*time.Second, "the message published", func() bool { return len(e.inbound()) == 1 })
	if n := e.requests(http.MethodPost, "/registry/heartbeat"); n != 0 {
		t.Fatalf("%d heartbeats sent, want none", n)
	}
}
