package agentapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// sendWithFiles posts a canvas message to the agent whose file parts name
// uris, as the canvas does after an upload.
func sendWithFiles(t *testing.T, w *pipelinetest.World, text string, uris ...string) {
	t.Helper()
	parts := []any{map[string]any{"kind": "text", "text": text}}
	for i, u := range uris {
		parts = append(parts, map[string]any{"kind": "file", "file": map[string]any{"uri": u, "name": "f" + string(rune('0'+i))}})
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "method": "message/send",
		"params": map[string]any{"message": map[string]any{"role": "user", "messageId": text + "-id", "parts": parts}}})
	if st, b, err := w.Plat.SendRaw(pipelinetest.Ctx(t), w.Agent.ID, w.Plat.CanvasHeader(), body); err != nil || st >= 300 {
		t.Fatalf("send: %d %s %v", st, b, err)
	}
}

// TestExecHandlerFetchesInboundUploadWithCurl: a canvas user's staged
// upload reaches an exec: program as an attachment, and the program reads
// its bytes and content type through GET /v1/files with curl. The relay
// does not ack it (the platform still serves it afterwards).
func TestExecHandlerFetchesInboundUploadWithCurl(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	srv := startAPI(t, w, agentapi.Config{})
	content := bytes.Repeat([]byte("binary\x00\xff-"), 10000) // 90 kB: more than one chunk
	up := w.Plat.StageUpload(w.Agent.ID, "scan.png", "image/png", content)
	out := filepath.Join(t.TempDir(), "got")
	prog := script(t, `uri=$(jq -r '.message.attachments[0].uri')
curl -sf -G -H "Authorization: Bearer $MOLECULE_AGENT_TOKEN" --data-urlencode "uri=$uri" \
  -o '`+out+`' -w '%{content_type}' "$MOLECULE_AGENT_API/v1/files" > '`+out+`.type' || exit 75
echo "read it"`)
	h, err := handler.Parse("exec:"+prog, handler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Agent: srv}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	sendWithFiles(t, w, "look at this", up.URI)
	pipelinetest.Eventually(t, 20*time.Second, "answer posted", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 1 })
	if n := w.Plat.Notifications(w.Agent.ID)[0].Message; n != "read it" {
		t.Fatalf("answer %q, want the program's (curl failed?)", n)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("program read %d bytes (%v), want the %d staged", len(got), err, len(content))
	}
	if ct, _ := os.ReadFile(out + ".type"); string(ct) != "image/png" {
		t.Fatalf("content type %q, want the platform's image/png", ct)
	}
	if s, _ := w.Plat.StagedUpload(up.FileID); s.Fetches != 1 || s.Acked {
		t.Fatalf("upload fetched %d times, acked %v; want 1, not acked", s.Fetches, s.Acked)
	}
}

// TestFileOutsideTheMessageIsRefused runs two messages through the real
// pipeline. The second one's handler reads its own upload with
// Request.File; a staged upload it was not sent is 403, as is its file
// part naming another workspace's upload; a path trick is 400 (in the
// message) or 403 (not); a workspace: part is 501; the first message's
// token is 401.
func TestFileOutsideTheMessageIsRefused(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	srv := startAPI(t, w, agentapi.Config{})
	mine := w.Plat.StageUpload(w.Agent.ID, "a.txt", "text/plain", []byte("mine"))
	notSent := w.Plat.StageUpload(w.Agent.ID, "b.txt", "text/plain", []byte("not sent"))
	peers := w.Plat.StageUpload(w.Peers[0].ID, "c.txt", "text/plain", []byte("peer's"))
	trick := "platform-pending:" + w.Agent.ID + "/../" + mine.FileID
	var mu sync.Mutex
	var firstToken string
	got := map[string]string{}
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		base, tok := endpoint(t, req.Agent)
		mu.Lock()
		defer mu.Unlock()
		if firstToken == "" {
			firstToken = tok
			return "", nil
		}
		get := func(name, token, uri string) {
			st, b := call(t, http.MethodGet, base+"/v1/files?uri="+url.QueryEscape(uri), token, "")
			got[name] = http.StatusText(st) + " " + strings.TrimSpace(string(b))
		}
		get("own", tok, mine.URI)
		get("not sent", tok, notSent.URI)
		get("other workspace", tok, peers.URI)
		get("trick in message", tok, trick)
		get("trick not in message", tok, "platform-pending:"+w.Agent.ID+"/"+mine.FileID+"/../x")
		get("workspace scheme", tok, "workspace:/workspace/x.txt")
		get("first message's token", firstToken, mine.URI)
		body, mime, err := req.File(ctx, mine.URI)
		if err != nil {
			got["Request.File"] = err.Error()
			return "", nil
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		got["Request.File"] = string(b) + " " + mime + " " + errString(err)
		return "", nil
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Handler: h, Dispatcher: dispatcher.Config{Agent: srv}})
	defer pl.Stop(t)
	w.WaitSeeded(w.Agent.ID)
	sendWithFiles(t, w, "first", mine.URI)
	pipelinetest.Eventually(t, 20*time.Second, "first handled", func() bool { mu.Lock(); defer mu.Unlock(); return firstToken != "" })
	sendWithFiles(t, w, "second", mine.URI, peers.URI, trick, "workspace:/workspace/x.txt")
	pipelinetest.Eventually(t, 20*time.Second, "second handled", func() bool { mu.Lock(); defer mu.Unlock(); return got["Request.File"] != "" })
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{
		"own":                   "OK mine",
		"not sent":              "Forbidden",
		"other workspace":       "Forbidden",
		"trick in message":      "Bad Request",
		"trick not in message":  "Forbidden",
		"workspace scheme":      "Not Implemented",
		"first message's token": "Unauthorized",
		"Request.File":          "mine text/plain <nil>",
	}
	for k, v := range want {
		if !strings.HasPrefix(got[k], v) {
			t.Errorf("%s: got %q, want %q…", k, got[k], v)
		}
	}
	if s, _ := w.Plat.StagedUpload(peers.FileID); s.Fetches != 0 {
		t.Errorf("the peer's upload was fetched %d times; want never", s.Fetches)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestFileOverTheCapOrGoneIsRefused: an upload larger than MaxFileBytes is
// 502 (nothing passed on), and one the platform no longer serves (here
// expired) is 404 saying so.
func TestFileOverTheCapOrGoneIsRefused(t *testing.T) {
	w := pipelinetest.New(t, pipelinetest.Options{})
	srv := startAPI(t, w, agentapi.Config{MaxFileBytes: 4})
	big := w.Plat.StageUpload(w.Agent.ID, "big.txt", "text/plain", []byte("12345"))
	gone := w.Plat.StageUpload(w.Agent.ID, "gone.txt", "text/plain", []byte("1234"))
	in := canvasMessage(w)
	in.Attachments = []events.Attachment{{URI: big.URI, Name: big.Name}, {URI: gone.URI, Name: gone.Name}}
	agent, end := srv.Open(pipelinetest.Ctx(t), in, time.Now().Add(time.Minute))
	defer end()
	base, tok := endpoint(t, agent)
	get := func(uri string) (int, string) {
		st, b := call(t, http.MethodGet, base+"/v1/files?uri="+url.QueryEscape(uri), tok, "")
		return st, string(b)
	}
	if st, b := get(gone.URI); st != http.StatusOK || b != "1234" {
		t.Fatalf("at the cap: %d %q, want 200 1234", st, b)
	}
	if st, b := get(big.URI); st != http.StatusBadGateway || !strings.Contains(b, "cap 4") {
		t.Fatalf("over the cap: %d %s, want 502 naming the cap", st, b)
	}
	w.Plat.ExpireUpload(gone.FileID)
	if st, b := get(gone.URI); st != http.StatusNotFound || !strings.Contains(b, "24 h") {
		t.Fatalf("after expiry: %d %s, want 404 saying the platform dropped it", st, b)
	}
}
