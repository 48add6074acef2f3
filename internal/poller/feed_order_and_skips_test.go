package poller_test

// docs/protocol.md §4 and §5 behaviours the poller relies on:
// an inconclusive generation probe is logged and polling carries on
// (§1); a full page is fetched again at once (§4); a newest-first cold-start
// or post-410 batch is delivered oldest first (§4); upload manifests and
// self-messages are skipped while the cursor passes them (§5).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// §1: a probe answer other than 410 or 200 is inconclusive: log it and
// carry on (T exits; that is wrong).
func TestInconclusiveProbeCarriesOn(t *testing.T) {
	e := newEnv(t)
	// The first GET /activity of a run is the generation probe.
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.ws.ID + "/activity",
		Status: http.StatusInternalServerError, Body: `{"error":"cursor lookup failed"}`, Count: 1})
	p := e.poller(poller.Config{})
	r := e.runOnce(p)
	if r.Generation != molecule.GenerationUnknown || r.Stopped || !r.Registered || !r.Heartbeat {
		t.Fatalf("first run after an inconclusive probe: %+v", r)
	}
	e.sendCanvas(e.ws.ID, "still polled")
	r = e.runOnce(p)
	if r.Stopped || r.Published != 1 {
		t.Fatalf("second run: %+v; polling must carry on after an inconclusive probe", r)
	}
	if got := e.inbound(); len(got) != 1 || got[0].Text != "still polled" {
		t.Fatalf("inbound: %+v", got)
	}
}

// §4: a full page (len == limit) means fetch again at once: one run drains
// a backlog larger than a page, page after page, with since_id.
func TestFullPageFetchesAgainAtOnce(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{PageLimit: 3})
	seedAtARow(e, p)
	sinceIDQueries := func() int {
		n := 0
		for _, r := range e.plat.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/activity") &&
				strings.Contains(r.Query, "since_id=") && !strings.Contains(r.Query, molecule.ZeroCursor) {
				n++
			}
		}
		return n
	}
	before := sinceIDQueries()
	for i := range 7 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	r := e.runOnce(p)
	if r.Published != 7 {
		t.Fatalf("one run published %d of 7 (page limit 3): %+v", r.Published, r)
	}
	if r.Overlap {
		t.Fatal("the overlap re-read ran in this run; the page count below would include it")
	}
	if n := sinceIDQueries() - before; n != 3 {
		t.Fatalf("%d since_id pages fetched, want 3 (3 full, 3 full, 1 short)", n)
	}
	ids := e.messageRowIDs(e.ws.ID)
	if r.Cursor != ids[len(ids)-1] {
		t.Fatalf("cursor %s, want the newest row %s", r.Cursor, ids[len(ids)-1])
	}
	assertExactlyOnce(t, e.inbound(), ids)
}

// §4: without since_id the platform answers newest first; the batch of a
// cold start and of a post-410 reset is processed oldest first and the
// newest row becomes the cursor.
func TestNewestFirstBatchesAreDeliveredOldestFirst(t *testing.T) {
	e := newEnv(t)
	e.register(e.ws)
	for i := range 3 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("old ", i))
	}
	p := e.poller(poller.Config{BacklogWindow: time.Hour, PageLimit: 2})
	r := e.runOnce(p)
	ids := e.messageRowIDs(e.ws.ID)
	if r.Published != 3 || r.Cursor != ids[len(ids)-1] {
		t.Fatalf("cold start: %+v; want 3 published, cursor at the newest row", r)
	}

	e.plat.PruneRows(e.ws.ID, time.Now().Add(time.Second)) // the cursor row is gone: 410
	for i := range 3 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("new ", i))
	}
	r = e.runOnce(p)
	ids = e.messageRowIDs(e.ws.ID)
	if r.Published != 3 || r.Cursor != ids[len(ids)-1] {
		t.Fatalf("after 410: %+v; want 3 published, cursor at the newest row", r)
	}

	want := []string{"old 0", "old 1", "old 2", "new 0", "new 1", "new 2"}
	got := e.inbound()
	if len(got) != len(want) {
		t.Fatalf("%d messages, want %d", len(got), len(want))
	}
	for i, m := range got {
		if m.Text != want[i] {
			t.Fatalf("message %d = %q, want %q (newest-first batches must be delivered oldest first)", i, m.Text, want[i])
		}
	}
}

// §5: rows that are the agent's own self-messages (source_id == self) and
// chat upload manifests are skipped, and the cursor still advances past
// them, so they are never read again.
func TestSelfAndUploadRowsAreSkippedAndPassed(t *testing.T) {
	t.Run("self-message from the real double", func(t *testing.T) {
		e := newEnv(t)
		p := e.poller(poller.Config{})
		seedAtARow(e, p)
		e.sendCanvas(e.ws.ID, "from the user")
		// A self-call: X-Workspace-ID == target, no checks, source_id = self.
		body := `{"jsonrpc":"2.0","id":"r1","method":"message/send","params":{"message":{"role":"agent","messageId":"self-1","parts":[{"kind":"text","text":"note to self"}]}}}`
		st, b, err := e.plat.SendRaw(ctx(t), e.ws.ID, http.Header{"X-Workspace-Id": {e.ws.ID}, "Authorization": {"Bearer " + e.ws.Token}}, []byte(body))
		if err != nil || st != http.StatusOK {
			t.Fatalf("self-call: %d %s %v", st, b, err)
		}
		r := e.runOnce(p)
		ids := e.messageRowIDs(e.ws.ID)
		if r.Published != 1 || r.Skipped[poller.SkipSelf] != 1 || r.Cursor != ids[len(ids)-1] {
			t.Fatalf("result %+v; want the user message published, the self row skipped and the cursor on it (%s)", r, ids[len(ids)-1])
		}
		if got := e.inbound(); len(got) != 2 || got[1].Text != "from the user" {
			t.Fatalf("inbound: %+v", got)
		}
		if r := e.runOnce(p); r.Published != 0 || r.Duplicates != 0 || r.Skipped[poller.SkipSelf] != 0 {
			t.Fatalf("next run read the self row again: %+v", r)
		}
	})
	t.Run("chat upload manifest", func(t *testing.T) {
		e := newEnv(t)
		p := e.poller(poller.Config{})
		seedAtARow(e, p) // so the page below answers a since_id query
		now := time.Now().UTC()
		const uploadID = "22222222-3333-4444-8555-666666666666"
		good := fmt.Sprintf(`{"id":"11111111-2222-4333-8444-555555555555","workspace_id":%q,"activity_type":"a2a_receive","source_id":null,"target_id":%q,"method":"message/send","summary":"s","status":"ok","request_body":{"params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"see attached"}]}}},"created_at":%q}`,
			e.ws.ID, e.ws.ID, now.Add(-time.Millisecond).Format(time.RFC3339Nano))
		upload := fmt.Sprintf(`{"id":%q,"workspace_id":%q,"activity_type":"a2a_receive","source_id":null,"target_id":%q,"method":"chat_upload_receive","summary":"chat upload: x.png","status":"ok","request_body":{"file_id":"f1","name":"x.png","mimeType":"image/png","size":3,"uri":"platform-pending:%s/f1"},"created_at":%q}`,
			uploadID, e.ws.ID, e.ws.ID, e.ws.ID, now.Format(time.RFC3339Nano))
		e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.ws.ID + "/activity",
			Status: http.StatusOK, Body: "[" + good + "," + upload + "]", Count: 1})
		res, err := p.RunOnce(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Workspaces[0]
		if r.Err != nil || r.Published != 1 || r.Skipped[poller.SkipUpload] != 1 || r.Malformed != 0 || r.Cursor != uploadID {
			t.Fatalf("result %+v; want one message, the upload skipped and the cursor on it", r)
		}
		if got := e.inbound(); len(got) != 2 || got[1].Text != "see attached" {
			t.Fatalf("inbound: %+v", got)
		}
	})
}

// seedAtARow runs p until its cursor points at a real row ("first",
// published), so the next run reads with since_id.
func seedAtARow(e *env, p *poller.Poller) {
	e.t.Helper()
	e.runOnce(p)
	e.sendCanvas(e.ws.ID, "first")
	if r := e.runOnce(p); r.Published != 1 || r.Cursor == "" {
		e.t.Fatalf("seeding run: %+v", r)
	}
}
