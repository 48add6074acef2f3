package moleculetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// resp is one answer.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (r resp) array(t *testing.T) []map[string]any {
	t.Helper()
	var a []map[string]any
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatalf("body %q is not a JSON array: %v", r.body, err)
	}
	return a
}

// hdr builds headers from key, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func bearerH(tok string) http.Header { return hdr("Authorization", "Bearer "+tok) }

var client = &http.Client{Timeout: 20 * time.Second}

func call(t *testing.T, srv *moleculetest.Server, method, path string, h http.Header, body string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// jsonEqual compares two JSON documents semantically.
func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("got %q is not JSON: %v", got, err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q is not JSON: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func expect(t *testing.T, r resp, status int, body string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d (body %s)", r.status, status, r.body)
		return
	}
	if body != "" && !jsonEqual(t, r.body, body) {
		t.Errorf("body %s, want %s", r.body, body)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func newServer(t *testing.T, opts ...moleculetest.Option) *moleculetest.Server {
	t.Helper()
	s := moleculetest.NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

// registerPoll registers w in poll mode and fails the test otherwise.
func registerPoll(t *testing.T, s *moleculetest.Server, w moleculetest.Workspace) {
	t.Helper()
	r := call(t, s, "POST", "/registry/register", bearerH(w.Token),
		`{"id":"`+w.ID+`","delivery_mode":"poll","agent_card":{"name":"`+w.Name+`"}}`)
	if r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// callerRow posts body to id's /a2a with h, expects status and want, and
// checks the row the call wrote: none when source is "" (a refused call),
// else one whose source_id is source (nil for a canvas caller).
func callerRow(t *testing.T, s *moleculetest.Server, id string, h http.Header, body string, status int, want string, source any) {
	t.Helper()
	before := len(s.Rows(id))
	r := call(t, s, "POST", "/workspaces/"+id+"/a2a", h, body)
	expect(t, r, status, want)
	rows := s.Rows(id)
	if source == "" {
		if len(rows) != before {
			t.Errorf("row written for a refused call")
		}
		return
	}
	if len(rows) != before+1 {
		t.Fatalf("rows %d, want %d", len(rows), before+1)
	}
	var row map[string]any
	if err := jsonUnmarshal(rows[len(rows)-1], &row); err != nil {
		t.Fatal(err)
	}
	if row["source_id"] != source {
		t.Errorf("source_id %v, want %v", row["source_id"], source)
	}
}
