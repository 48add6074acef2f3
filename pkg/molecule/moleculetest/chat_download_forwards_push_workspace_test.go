package moleculetest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestChatDownloadForwardsToPushWorkspace: GET /chat/download of a
// push-mode workspace is forwarded to its own /internal/file/read?path=
// with its platform_inbound_secret as the bearer, and the workspace's
// answer comes back with its Content-Type (enteros-core aeec8e47
// workspace-server/internal/handlers/chat_files.go 459-498, 508-533).
func TestChatDownloadForwardsToPushWorkspace(t *testing.T) {
	s := newServer(t)
	var gotPath, gotAuth string
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAuth = r.URL.Path+"?"+r.URL.RawQuery, r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "image/png")
		_, _ = io.WriteString(w, "png bytes")
	}))
	t.Cleanup(ws.Close)
	u, _ := url.Parse(ws.URL)
	a := s.CreateWorkspace("push-A")
	expect(t, call(t, s, "POST", "/registry/register", bearerH(a.Token), `{"id":"`+a.ID+`","url":"http://localhost:`+u.Port()+`/","agent_card":{}}`), 200, "")
	r := call(t, s, "GET", "/workspaces/"+a.ID+"/chat/download?path="+url.QueryEscape("/workspace/out dir/x.png"), bearerH(a.Token), "")
	if r.status != 200 || string(r.body) != "png bytes" {
		t.Fatalf("download: %d %q", r.status, r.body)
	}
	if gotPath != "/internal/file/read?path=%2Fworkspace%2Fout+dir%2Fx.png" || gotAuth != "Bearer "+s.InboundSecret(a.ID) {
		t.Fatalf("forwarded %s with %q; want the path query and the inbound secret", gotPath, gotAuth)
	}
}
