package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A one-shot run with the push ingress configured is a usage error (exit
// 2) that says why, and contacts nothing.
func TestOnceWithPushListenExits2(t *testing.T) {
	var hits atomic.Int64
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer platform.Close()
	environ := []string{"MOLECULE_PLATFORM_URL=" + platform.URL, "MOLECULE_WORKSPACE_ID=35637291-d55e-4553-896c-13c2e02fe4f7",
		"MOLECULE_WORKSPACE_TOKEN=secret-token-that-must-not-leak-0000000000", "NATS_URL=nats://127.0.0.1:1",
		"MOLECULE_PUSH_LISTEN=127.0.0.1:0", "MOLECULE_PUSH_URL=http://localhost:8081"}
	for _, cmd := range []string{"connect", "poll"} {
		r := runCLI(t, environ, cmd, "--once")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--once") || !strings.Contains(r.stderr, "MOLECULE_PUSH_LISTEN") {
			t.Errorf("%s --once with push: exit %d, stderr %q; want exit 2 explaining --once and MOLECULE_PUSH_LISTEN", cmd, r.code, r.stderr)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the platform got %d requests", n)
	}
}
