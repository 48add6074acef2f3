package relay

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

const streamChild = "RELAY_TEST_STREAM_GOROUTINES_CHILD"

// streamClient is a workspace client whose event stream goes through
// streamTransport over pooled, as newClients builds it.
func streamClient(t *testing.T, srv *moleculetest.Server, ws moleculetest.Workspace, pooled *http.Transport) *molecule.Client {
	t.Helper()
	c, err := molecule.New(molecule.Config{
		PlatformURL:      srv.URL(),
		WorkspaceID:      ws.ID,
		Token:            ws.Token,
		HTTPClient:       &http.Client{Transport: pooled},
		StreamHTTPClient: &http.Client{Transport: streamTransport{pooled: pooled}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openStream holds c's event stream until the returned stop is called,
// and waits for the echo of one heartbeat on it; stop returns
// StreamEvents' error.
func openStream(t *testing.T, c *molecule.Client) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan molecule.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.StreamEvents(ctx, func(ev molecule.Event) { events <- ev })
	}()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for echoed := false; !echoed; {
		// A heartbeat sent before the stream is open echoes to no one:
		// send one until an echo arrives.
		if _, err := c.Heartbeat(ctx, molecule.Heartbeat{}); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		select {
		case ev := <-events:
			echoed = ev.Type == "WORKSPACE_HEARTBEAT"
		case err := <-done:
			t.Fatalf("the stream ended: %v", err)
		case <-deadline:
			t.Fatal("no heartbeat echo on the stream within 10 s")
		case <-tick.C:
		}
	}
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not end within 10 s of its context")
			return nil
		}
	}
}

// A held event stream costs its reader goroutine alone: no connection
// goroutines of net/http (readLoop, writeLoop) stay behind it, as they
// did for each of a fleet's streams. Checked in a child process, where no
// other test's connections are open; the heartbeats' pooled connections
// are closed before the count.
func TestEventStreamHoldsNoConnectionGoroutines(t *testing.T) {
	if os.Getenv(streamChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestEventStreamHoldsNoConnectionGoroutines$", "-test.count", "1")
		cmd.Env = append(os.Environ(), streamChild+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	srv := moleculetest.NewServer()
	defer srv.Close()
	ws := srv.CreateWorkspace("stream")
	pooled := http.DefaultTransport.(*http.Transport).Clone()
	stop := openStream(t, streamClient(t, srv, ws, pooled))
	pooled.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		n := strings.Count(dump.String(), "net/http.(*persistConn)")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an open event stream keeps %d net/http connection goroutine frames:\n%s", n, dump.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stream ended with %v, want context.Canceled", err)
	}
}

// The stream's context ends it (closing its connection ends a read in
// progress), and a stream that ended leaves a fresh one free to open.
func TestEventStreamEndsWithItsContext(t *testing.T) {
	srv := moleculetest.NewServer()
	defer srv.Close()
	ws := srv.CreateWorkspace("stream")
	c := streamClient(t, srv, ws, http.DefaultTransport.(*http.Transport).Clone())
	for range 2 {
		if err := openStream(t, c)(); !errors.Is(err, context.Canceled) {
			t.Fatalf("the stream ended with %v, want context.Canceled", err)
		}
	}
}

// Over https (HTTP/2 multiplexes the streams there) the stream goes through
// the pooled transport, and works.
func TestEventStreamOverHTTPSUsesThePool(t *testing.T) {
	srv := moleculetest.NewServer(moleculetest.WithTLS())
	defer srv.Close()
	ws := srv.CreateWorkspace("stream")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.CertPEM()) {
		t.Fatal("the double's certificate does not parse")
	}
	pooled := http.DefaultTransport.(*http.Transport).Clone()
	pooled.TLSClientConfig.RootCAs = pool
	if err := openStream(t, streamClient(t, srv, ws, pooled))(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stream ended with %v, want context.Canceled", err)
	}
}
