package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"
)

const sinkEnv = "BENCH_HTTP_SINK"

// TestHTTPSinkChild is the HTTP server of BenchmarkFloor's http/post run:
// not a test. It runs in a re-executed copy of the test binary, so the
// server's CPU is not counted with the client's; it answers every request
// with 200 and a small JSON body, as the platform answers a notify, prints
// its URL and serves until its stdin closes.
func TestHTTPSinkChild(t *testing.T) {
	if os.Getenv(sinkEnv) == "" {
		t.Skip("BenchmarkFloor's HTTP server; runs only when the benchmark starts it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"sent"}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("%s%q\n", childPrefix, "http://"+ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

type httpSink struct{ url string }

func startHTTPSink(b *testing.B) *httpSink {
	var url string
	if rp := startChildProc(b, "TestHTTPSinkChild", sinkEnv+"=1"); rp.read(&url) != nil || url == "" {
		b.Fatalf("HTTP sink did not start; stderr: %.1000s", rp.stderr.String())
	}
	return &httpSink{url: url}
}

// floor posts n notify-sized JSON bodies from as many workers as the
// replier has, on a transport pooled as the relay's (relay
// platformHTTPClients), and reports this process's CPU per POST: the
// client's share of one reply's HTTP round trip.
func (s *httpSink) floor(b *testing.B, n int) {
	hc := httpClient(true)
	ctx := context.Background()
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range *flagReplyConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := s.post(ctx, hc); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	cpu0, t0 := selfCPU(), time.Now()
	b.ResetTimer()
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	b.StopTimer()
	wall, cpu := time.Since(t0), selfCPU()-cpu0
	us := float64(cpu.Microseconds()) / float64(n)
	m := metrics{"msg/s": float64(n) / wall.Seconds(), "relay_us/msg": us, "msg/relay_cpu_s": 1e6 / us, "load1": loadavg()}
	m.report(b)
	record(b.Name(), m)
}

// sinkBody is a notify-sized reply, made once as the burst floor made it.
var sinkBody = []byte(`{"message":"echo: message 12345 from the benchmark","attachments":[]}`)

// post sends one notify-sized JSON body, as the replier posts a reply, and
// reads the answer to its end so the connection is reused.
func (s *httpSink) post(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/workspaces/ws/notify", bytes.NewReader(sinkBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer bench")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
