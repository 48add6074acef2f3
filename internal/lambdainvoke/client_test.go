package lambdainvoke_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/lambdainvoke"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	creds := map[string]string{"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range creds {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name         string
		env          map[string]string
		wantEndpoint string
		wantRegion   string
		wantErr      bool
	}{
		{"default endpoint", with("AWS_REGION", "eu-west-1"), "https://lambda.eu-west-1.amazonaws.com", "eu-west-1", false},
		{"AWS_DEFAULT_REGION", with("AWS_DEFAULT_REGION", "us-west-2"), "https://lambda.us-west-2.amazonaws.com", "us-west-2", false},
		{"China", with("AWS_REGION", "cn-north-1"), "https://lambda.cn-north-1.amazonaws.com.cn", "cn-north-1", false},
		{"service endpoint wins", with("AWS_REGION", "us-east-1", "AWS_ENDPOINT_URL", "http://a:1", "AWS_ENDPOINT_URL_LAMBDA", "http://b:2"), "http://b:2", "us-east-1", false},
		{"global endpoint", with("AWS_REGION", "us-east-1", "AWS_ENDPOINT_URL", "http://a:1"), "http://a:1", "us-east-1", false},
		{"endpoints ignored", with("AWS_REGION", "us-east-1", "AWS_ENDPOINT_URL", "http://a:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"), "https://lambda.us-east-1.amazonaws.com", "us-east-1", false},
		{"no region", with(), "", "", true},
		{"no credentials", map[string]string{"AWS_REGION": "us-east-1"}, "", "", true},
		{"bad endpoint", with("AWS_REGION", "us-east-1", "AWS_ENDPOINT_URL_LAMBDA", "localhost:9001"), "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := lambdainvoke.FromEnv(envOf(tc.env))
			if tc.wantErr {
				if !errors.Is(err, lambdainvoke.ErrConfig) {
					t.Fatalf("err %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Endpoint() != tc.wantEndpoint || c.Region() != tc.wantRegion {
				t.Errorf("endpoint %q region %q, want %q %q", c.Endpoint(), c.Region(), tc.wantEndpoint, tc.wantRegion)
			}
		})
	}
}

var authRE = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKID/\d{8}/eu-west-1/lambda/aws4_request, SignedHeaders=([a-z0-9-;]+), Signature=[0-9a-f]{64}$`)

// TestInvokeRequest checks the request on the wire: path (an ARN's colons
// escaped), invocation type, payload and a well-formed SigV4 signature
// that covers the session token. The emulator (internal/testkit/lambdaemu) checks
// the signature itself.
func TestInvokeRequest(t *testing.T) {
	var got struct {
		path, typ, auth, token, date, body string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.path, got.typ, got.auth, got.body = r.URL.EscapedPath(), r.Header.Get("X-Amz-Invocation-Type"), r.Header.Get("Authorization"), string(b)
		got.token, got.date = r.Header.Get("X-Amz-Security-Token"), r.Header.Get("X-Amz-Date")
		if r.Header.Get("X-Amz-Invocation-Type") == "Event" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	c, err := lambdainvoke.FromEnv(envOf(map[string]string{"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_LAMBDA": srv.URL,
		"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "session"}))
	if err != nil {
		t.Fatal(err)
	}
	arn := "arn:aws:lambda:eu-west-1:123456789012:function:relay-dispatcher"
	if out, err := c.Invoke(context.Background(), arn, lambdainvoke.Event, []byte(`{"a":1}`)); err != nil || len(out) != 0 {
		t.Fatalf("Event: %q %v", out, err)
	}
	if got.path != "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Arelay-dispatcher/invocations" {
		t.Errorf("path %q", got.path)
	}
	m := authRE.FindStringSubmatch(got.auth)
	if m == nil {
		t.Fatalf("Authorization %q is not a SigV4 header", got.auth)
	}
	if !regexp.MustCompile(`(^|;)x-amz-security-token(;|$)`).MatchString(m[1]) || !regexp.MustCompile(`(^|;)host(;|$)`).MatchString(m[1]) {
		t.Errorf("signed headers %q miss host or the session token", m[1])
	}
	if got.typ != "Event" || got.body != `{"a":1}` || got.token != "session" || len(got.date) != 16 {
		t.Errorf("request: %+v", got)
	}
	out, err := c.Invoke(context.Background(), "relay-replier", lambdainvoke.RequestResponse, nil)
	if err != nil || string(out) != `{"ok":true}` || got.path != "/2015-03-31/functions/relay-replier/invocations" {
		t.Errorf("RequestResponse: %q %v %q", out, err, got.path)
	}
}

func TestInvokeAPIError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException:http://internal.amazon.com/coral/com.amazonaws.awsgirlambda.v20150331/")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"Type":"User","Message":"Function not found: arn:aws:lambda:us-east-1:0:function:nope"}`)
	}))
	t.Cleanup(srv.Close)
	c, err := lambdainvoke.FromEnv(envOf(map[string]string{"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": srv.URL,
		"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Invoke(context.Background(), "nope", lambdainvoke.Event, nil)
	var ae *lambdainvoke.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Type != "ResourceNotFoundException" || ae.Message == "" {
		t.Fatalf("err %#v", err)
	}
}

// fakeInvoker records invocations; block holds each one until released.
type fakeInvoker struct {
	mu    sync.Mutex
	calls []time.Time
	fail  atomic.Bool
	block chan struct{}
	ch    chan struct{} // if set, gets one value per call
}

func (f *fakeInvoker) Invoke(ctx context.Context, function, typ string, payload []byte) ([]byte, error) {
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	f.mu.Unlock()
	if f.ch != nil {
		f.ch <- struct{}{}
	}
	if f.fail.Load() {
		return nil, errors.New("boom")
	}
	return nil, nil
}

func (f *fakeInvoker) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// TestWakerCoalesces: a hundred wake-ups while a round is in flight and
// within the interval become one round; Flush sends what is outstanding at
// once; a round invokes the largest count asked for; failures never
// surface.
func TestWakerCoalesces(t *testing.T) {
	f := &fakeInvoker{block: make(chan struct{})}
	w := lambdainvoke.NewWaker(f, "relay-dispatcher", time.Hour, nil)
	w.Wake(1) // starts a round at once, held by block
	for range 100 {
		w.Wake(1)
	}
	w.Wake(3)
	close(f.block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Flush(ctx) // the held round, then the coalesced one despite the hour
	if got := f.count(); got != 1+3 {
		t.Fatalf("%d invocations, want 4 (a round of 1, then one round of the largest ask, 3)", got)
	}
	// Nothing outstanding: Flush sends nothing.
	w.Flush(ctx)
	if got := f.count(); got != 4 {
		t.Fatalf("%d invocations after an idle flush", got)
	}
	// Within the hour a wake-up waits; only Flush sends it.
	w.Wake(1)
	if got := f.count(); got != 4 {
		t.Fatalf("a wake-up within the interval was sent at once")
	}
	f.fail.Store(true)
	w.Flush(ctx)
	if sent, failed := w.Counts(); sent != 4 || failed != 1 {
		t.Fatalf("sent %d failed %d, want 4 and 1", sent, failed)
	}
}

// TestWakerInterval: with a short interval, a wake-up after a round is
// sent by the timer without a Flush.
func TestWakerInterval(t *testing.T) {
	f := &fakeInvoker{ch: make(chan struct{}, 4)}
	w := lambdainvoke.NewWaker(f, "fn", 50*time.Millisecond, nil)
	w.Wake(1)
	w.Wake(1)
	timeout := time.After(10 * time.Second)
	for range 2 {
		select {
		case <-f.ch:
		case <-timeout:
			t.Fatalf("%d invocations; the timer never sent the second round", f.count())
		}
	}
	f.mu.Lock()
	gap := f.calls[1].Sub(f.calls[0])
	f.mu.Unlock()
	if gap < 40*time.Millisecond {
		t.Errorf("two rounds %s apart, interval 50ms", gap)
	}
}
