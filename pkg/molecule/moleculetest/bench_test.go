package moleculetest_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestCloseLeavesNoGoroutines exercises SSE, async and late rows, and a
// hanging push delivery, then checks Close takes every goroutine with it.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	cl := &http.Client{Transport: &http.Transport{}}
	before := runtime.NumGoroutine()
	func() {
		s := moleculetest.NewServer(moleculetest.WithAsyncRows(time.Hour), moleculetest.WithLateCommit(0.5, time.Hour))
		a := s.CreateWorkspace("ext-A")
		registerPoll(t, s, a)
		req, _ := http.NewRequest("GET", s.URL()+"/workspaces/"+a.ID+"/events/stream", nil)
		req.Header.Set("Authorization", "Bearer "+a.Token)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		for i := 0; i < 4; i++ {
			s.SendCanvas(context.Background(), a.ID, "x")
		}
		// A push delivery to an agent that never answers, cut short by Close.
		hang := newAgent(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { <-r.Context().Done() })
		b := s.CreateWorkspace("ext-B")
		call(t, s, "POST", "/registry/register", bearerH(b.Token), `{"id":"`+b.ID+`","url":"`+hang.localhostURL("/")+`","agent_card":{}}`)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.SendCanvas(context.Background(), b.ID, "hang")
		}()
		waitFor(t, "push in flight", 5*time.Second, func() bool {
			hang.mu.Lock()
			defer hang.mu.Unlock()
			return len(hang.got) == 1
		})
		start := time.Now()
		s.Close()
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close took %v", d)
		}
		<-done
		hang.srv.Close()
	}()
	cl.CloseIdleConnections()
	client.CloseIdleConnections()
	waitFor(t, "goroutines to exit", 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before+2
	})
}

// BenchmarkThroughput pushes canvas messages, notifies and activity pages
// of 500 through one double with the limiter and request log off.
// go test -run '^$' -bench Throughput ./pkg/molecule/moleculetest/
func BenchmarkThroughput(b *testing.B) {
	for _, mix := range []struct {
		name string
		ops  []int // 0 a2a, 1 notify, 2 page of 500
	}{{"a2a", []int{0}}, {"notify", []int{1}}, {"page500", []int{2}}, {"mixed", []int{0, 0, 1, 2}}} {
		b.Run(mix.name, func(b *testing.B) { benchOps(b, mix.ops) })
	}
}

func benchOps(b *testing.B, ops []int) {
	s := moleculetest.NewServer(moleculetest.WithRateLimit(0, 0), moleculetest.WithoutRequestLog())
	defer s.Close()
	ws := make([]moleculetest.Workspace, 8)
	for i := range ws {
		ws[i] = s.CreateWorkspace("ws-" + strconv.Itoa(i))
		r, err := http.NewRequest("POST", s.URL()+"/registry/register", strings.NewReader(`{"id":"`+ws[i].ID+`","delivery_mode":"poll","agent_card":{}}`))
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+ws[i].Token)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		res.Body.Close()
	}
	if ops[0] == 2 { // something to page through
		for i := 0; i < 600; i++ {
			for _, w := range ws {
				s.SendCanvas(context.Background(), w.ID, "seed")
			}
		}
	}
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var n atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N/8 + 1
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(w moleculetest.Workspace) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				var req *http.Request
				switch ops[i%len(ops)] {
				case 0:
					req, _ = http.NewRequest("POST", s.URL()+"/workspaces/"+w.ID+"/a2a", strings.NewReader(canvasMsg))
				case 1:
					req, _ = http.NewRequest("POST", s.URL()+"/workspaces/"+w.ID+"/notify", strings.NewReader(`{"message":"reply text"}`))
				case 2:
					req, _ = http.NewRequest("GET", s.URL()+"/workspaces/"+w.ID+"/activity?type=a2a_receive&limit=500", nil)
				}
				req.Header.Set("Authorization", "Bearer "+w.Token)
				res, err := cl.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				n.Add(1)
			}
		}(ws[g])
	}
	wg.Wait()
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "req/s")
}
