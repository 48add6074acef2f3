package molecule_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// closedURL returns an http URL on 127.0.0.1 where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// platformFor answers discover with peerURL and a2a with queued, counting
// discover calls.
func platformFor(t *testing.T, peerURL string, discovers *atomic.Int32) *wireServer {
	return newWire(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/registry/discover/"):
			discovers.Add(1)
			fmt.Fprintf(w, `{"id":"peer","name":"P","url":%q}`, peerURL)
		case strings.HasSuffix(r.URL.Path, "/a2a"):
			io.WriteString(w, `{"status":"queued","delivery_mode":"poll","method":"message/send"}`)
		default:
			w.WriteHeader(404)
		}
	})
}

func TestCallPeerFallsBackWhenPeerUnreachable(t *testing.T) {
	var discovers atomic.Int32
	plat := platformFor(t, closedURL(t)+"/secret-path?k=SECRET", &discovers)
	c := wireClient(t, plat.URL, nil)
	m := molecule.A2AMessage{To: "peer", Text: "hi", MessageID: "m1"}
	res, err := c.CallPeer(context.Background(), m)
	if err != nil || !res.Queued {
		t.Fatalf("CallPeer = %+v, %v", res, err)
	}
	if r := plat.last(t); r.Path != "/workspaces/peer/a2a" {
		t.Fatalf("fallback went to %s", r.Path)
	}
	// The unreachable URL was dropped from the cache: discover is asked again.
	if _, err := c.CallPeer(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if discovers.Load() != 2 {
		t.Fatalf("%d discovers, want 2", discovers.Load())
	}
}

func TestCallPeerNoFallbackOnceThePeerAnswered(t *testing.T) {
	var peerHits atomic.Int32
	peer := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		peerHits.Add(1)
		w.WriteHeader(500)
		io.WriteString(w, `{"error":"agent crashed"}`)
	})
	var discovers atomic.Int32
	plat := platformFor(t, peer.URL+"/hook/SECRET", &discovers)
	c := wireClient(t, plat.URL, nil)
	_, err := c.CallPeer(context.Background(), molecule.A2AMessage{To: "peer", Text: "hi", MessageID: "m1"})
	var ae *molecule.APIError
	if !errors.Is(err, molecule.ErrPeerCall) || !errors.As(err, &ae) || ae.StatusCode != 500 {
		t.Fatalf("err = %v; want ErrPeerCall with status 500", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("error shows the peer URL's secret: %v", err)
	}
	for _, r := range plat.requests() {
		if strings.HasSuffix(r.Path, "/a2a") {
			t.Fatal("message re-sent through the platform after the peer answered")
		}
	}
	if peerHits.Load() != 1 {
		t.Fatalf("peer hit %d times", peerHits.Load())
	}
}

func TestCallPeerDroppedConnectionIsNotResent(t *testing.T) {
	peer := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	var discovers atomic.Int32
	plat := platformFor(t, peer.URL, &discovers)
	c := wireClient(t, plat.URL, nil)
	_, err := c.CallPeer(context.Background(), molecule.A2AMessage{To: "peer", Text: "hi", MessageID: "m1"})
	if !errors.Is(err, molecule.ErrPeerCall) {
		t.Fatalf("err = %v; want ErrPeerCall", err)
	}
	for _, r := range plat.requests() {
		if strings.HasSuffix(r.Path, "/a2a") {
			t.Fatal("message re-sent through the platform after the peer got it")
		}
	}
}

func TestCallPeerWithoutUsableURLUsesPlatform(t *testing.T) {
	for _, u := range []string{"", "remote://no-inbound", "http://ws-abc:8000"} {
		t.Run(u, func(t *testing.T) {
			var discovers atomic.Int32
			plat := platformFor(t, u, &discovers)
			c := wireClient(t, plat.URL, nil)
			// "http://ws-abc:8000" is a Docker-internal URL: it looks usable
			// but does not resolve, so the dial fails before anything is
			// sent and the platform proxy takes the message.
			res, err := c.CallPeer(context.Background(), molecule.A2AMessage{To: "peer", Text: "hi", MessageID: "m1"})
			if err != nil || !res.Queued {
				t.Fatalf("CallPeer = %+v, %v", res, err)
			}
			if r := plat.last(t); r.Path != "/workspaces/peer/a2a" || r.Header.Get("Authorization") != "Bearer "+wireToken {
				t.Fatalf("last request %s %v", r.Path, r.Header)
			}
		})
	}
}

func TestCallPeerDiscoverFailureUsesPlatform(t *testing.T) {
	plat := newWire(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/registry/discover/") {
			w.WriteHeader(403)
			io.WriteString(w, `{"error":"not authorized to discover this workspace"}`)
			return
		}
		w.WriteHeader(202)
		io.WriteString(w, `{"queued":true,"queue_id":"q","queue_depth":1}`)
	})
	c := wireClient(t, plat.URL, nil)
	res, err := c.CallPeer(context.Background(), molecule.A2AMessage{To: "peer", Text: "hi", MessageID: "m1"})
	if err != nil || !res.Queued || res.StatusCode != 202 {
		t.Fatalf("CallPeer = %+v, %v", res, err)
	}
}
