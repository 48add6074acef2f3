package lambdaemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The credentials a Service hands its functions (as Lambda hands a function
// its role's temporary credentials) and requires on the Invoke API.
const (
	ServiceAccessKeyID     = "ASIAEMULATEDEXAMPLE"
	ServiceSecretAccessKey = "emulated/secret/access/key/EXAMPLEKEY"
	ServiceSessionToken    = "emulated-session-token"
)

// defaultReservedConcurrency stands for the account's concurrency when a
// function reserves none: enough for any test here.
const defaultReservedConcurrency = 10

// FunctionConfig describes one function of a Service.
type FunctionConfig struct {
	// Name is the function name (required).
	Name string
	// Bootstrap is the path of the runtime binary (required).
	Bootstrap string
	// Env is added to the execution environments' variables and wins over
	// those the Service sets (AWS_ENDPOINT_URL_LAMBDA and the credentials).
	Env []string
	// Timeout is the function timeout. If not set, 3 seconds (Lambda's).
	Timeout time.Duration
	// ReservedConcurrency bounds the execution environments that run at
	// once. If not set, 10.
	ReservedConcurrency int
}

// Service is the Lambda service for several functions: the Invoke API
// (POST /2015-03-31/functions/{name}/invocations, SigV4-checked) on
// 127.0.0.1, and for each function a runtime API (an Emulator) with as
// many execution environments (bootstrap processes) as concurrent
// invocations need, up to the function's reserved concurrency. An
// asynchronous (Event) invocation beyond it waits in the function's queue,
// as Lambda's asynchronous queue retries a throttled event; a synchronous
// one is refused with TooManyRequestsException.
type Service struct {
	t   testing.TB
	ln  net.Listener
	srv *http.Server

	mu     sync.Mutex
	fns    map[string]*Function
	closed bool
	// badAuth counts Invoke API requests refused for their signature.
	badAuth int
}

// Function is one function of a Service.
type Function struct {
	svc *Service
	cfg FunctionConfig
	emu *Emulator

	mu      sync.Mutex
	procs   []*Process
	calls   []Call
	changed chan struct{} // closed and replaced when a call ends
}

// Call is one invocation a Function received.
type Call struct {
	// Type is the invocation type: Event or RequestResponse.
	Type string
	// Payload is the event.
	Payload []byte
	// Received is when the invocation arrived; Result.Duration runs from
	// its dispatch to its answer.
	Received time.Time
	Result   Result
	Err      error
}

// StartService starts a Service; it is closed at test cleanup, after the
// execution environments it started.
func StartService(t testing.TB) *Service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("lambdaemu: %v", err)
	}
	s := &Service{t: t, ln: ln, fns: map[string]*Function{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(s.close)
	return s
}

// URL is the value for AWS_ENDPOINT_URL_LAMBDA.
func (s *Service) URL() string { return "http://" + s.ln.Addr().String() }

// BadSignatures returns how many Invoke API requests were refused for a
// missing, malformed or wrong SigV4 signature.
func (s *Service) BadSignatures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.badAuth
}

// AddFunction creates a function. Its execution environments start on
// demand: the first invocation is a cold start.
func (s *Service) AddFunction(cfg FunctionConfig) *Function {
	s.t.Helper()
	if cfg.Name == "" || cfg.Bootstrap == "" {
		s.t.Fatalf("lambdaemu: a function needs a name and a bootstrap")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.ReservedConcurrency <= 0 {
		cfg.ReservedConcurrency = defaultReservedConcurrency
	}
	emu, err := New(Options{FunctionName: cfg.Name})
	if err != nil {
		s.t.Fatalf("lambdaemu: %v", err)
	}
	f := &Function{svc: s, cfg: cfg, emu: emu, changed: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fns[cfg.Name] = f
	return f
}

func (s *Service) close() {
	s.mu.Lock()
	s.closed = true
	fns := s.fns
	s.mu.Unlock()
	_ = s.srv.Close()
	for _, f := range fns {
		f.emu.Close()
	}
}

// Emulator returns the function's runtime API.
func (f *Function) Emulator() *Emulator { return f.emu }

// ARN returns the function's ARN.
func (f *Function) ARN() string { return f.emu.FunctionARN() }

// Calls returns the invocations received so far that have finished.
func (f *Function) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Environments returns how many execution environments were started.
func (f *Function) Environments() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.procs)
}

// Output returns what every execution environment of the function wrote.
func (f *Function) Output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, p := range f.procs {
		b.WriteString(p.Output())
	}
	return b.String()
}

// Invoke runs one synchronous invocation (as RequestResponse, without
// the concurrency refusal) and returns its result.
func (f *Function) Invoke(ctx context.Context, payload []byte) (Result, error) {
	return f.invoke(ctx, "RequestResponse", payload)
}

// InvokeAsync queues one asynchronous invocation (Event), as the
// EventBridge Scheduler does.
func (f *Function) InvokeAsync(payload []byte) {
	go func() { _, _ = f.invoke(context.Background(), "Event", payload) }()
}

// Every invokes the function asynchronously now and then every period
// (a schedule), until the returned stop is called or the test ends.
func (f *Function) Every(period time.Duration, payload []byte) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(done) }) }
	f.svc.t.Cleanup(stop)
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			f.InvokeAsync(payload)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return stop
}

func (f *Function) invoke(ctx context.Context, typ string, payload []byte) (Result, error) {
	c := Call{Type: typ, Payload: payload, Received: time.Now()}
	inv, err := f.emu.enqueue(payload, f.cfg.Timeout)
	if err == nil {
		f.scale()
		c.Result, c.Err = f.emu.await(ctx, inv)
	} else {
		c.Err = err
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return c.Result, c.Err
}

// WaitCalls waits until at least n invocations have finished, or ctx ends,
// and returns the finished ones.
func (f *Function) WaitCalls(ctx context.Context, n int) ([]Call, error) {
	for {
		f.mu.Lock()
		calls, changed := append([]Call(nil), f.calls...), f.changed
		f.mu.Unlock()
		if len(calls) >= n {
			return calls, nil
		}
		select {
		case <-ctx.Done():
			return calls, fmt.Errorf("%s: %d of %d invocations finished: %w", f.cfg.Name, len(calls), n, ctx.Err())
		case <-changed:
		}
	}
}

// scale starts execution environments while invocations wait and none is
// free, up to the reserved concurrency.
func (f *Function) scale() {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := 0
	for _, p := range f.procs {
		select {
		case <-p.Exited():
		default:
			live++
		}
	}
	idle, queued := f.emu.free()
	for ; queued > idle && live < f.cfg.ReservedConcurrency; live++ {
		f.svc.mu.Lock()
		closed := f.svc.closed
		f.svc.mu.Unlock()
		if closed {
			return
		}
		env := append([]string{
			"AWS_ENDPOINT_URL_LAMBDA=" + f.svc.URL(),
			"AWS_ACCESS_KEY_ID=" + ServiceAccessKeyID,
			"AWS_SECRET_ACCESS_KEY=" + ServiceSecretAccessKey,
			"AWS_SESSION_TOKEN=" + ServiceSessionToken,
		}, f.cfg.Env...)
		p, err := startProcess(f.svc.t, f.emu, f.cfg.Bootstrap, env)
		if err != nil {
			f.svc.t.Errorf("lambdaemu: start %s: %v", f.cfg.Name, err)
			return
		}
		f.procs = append(f.procs, p)
		idle++
	}
}

// busy reports whether a synchronous invocation would find no environment.
func (f *Function) busy() bool {
	f.mu.Lock()
	live := len(f.procs)
	f.mu.Unlock()
	idle, queued := f.emu.free()
	return idle <= queued && live >= f.cfg.ReservedConcurrency
}

var invokePath = regexp.MustCompile(`^/2015-03-31/functions/([^/]+)/invocations$`)

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	m := invokePath.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		apiError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "InvalidRequestContentException", err.Error())
		return
	}
	if err := checkSignature(r, body); err != nil {
		s.mu.Lock()
		s.badAuth++
		s.mu.Unlock()
		apiError(w, http.StatusForbidden, "InvalidSignatureException", err.Error())
		return
	}
	name := functionName(m[1])
	s.mu.Lock()
	f := s.fns[name]
	s.mu.Unlock()
	if f == nil {
		apiError(w, http.StatusNotFound, "ResourceNotFoundException",
			"Function not found: arn:aws:lambda:"+defaultFunctionRegion+":000000000000:function:"+name)
		return
	}
	switch typ := r.Header.Get("X-Amz-Invocation-Type"); typ {
	case "Event":
		f.InvokeAsync(body)
		w.WriteHeader(http.StatusAccepted)
	case "", "RequestResponse":
		if f.busy() {
			apiError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate Exceeded.")
			return
		}
		res, err := f.invoke(r.Context(), "RequestResponse", body)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "ServiceException", err.Error())
			return
		}
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		if res.ErrorType != "" {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(res.Payload)
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusBadRequest, "InvalidParameterValueException", "invalid X-Amz-Invocation-Type "+typ)
	}
}

// functionName takes the name out of a name, a partial ARN
// (123456789012:function:name) or an ARN, dropping a qualifier.
func functionName(s string) string {
	if i := strings.Index(s, "function:"); i >= 0 {
		s = s[i+len("function:"):]
	}
	name, _, _ := strings.Cut(s, ":")
	return name
}

var authHeader = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([a-z0-9-]+)/lambda/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)

// checkSignature verifies the request's SigV4 signature: the header's
// shape, the access key, the session token, then the signature itself,
// recomputed over the signed headers with the Service's secret.
func checkSignature(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	m := authHeader.FindStringSubmatch(auth)
	if m == nil {
		return fmt.Errorf("the Authorization header %q is not a SigV4 header for the lambda service", auth)
	}
	if m[1] != ServiceAccessKeyID {
		return fmt.Errorf("unknown access key %s", m[1])
	}
	if r.Header.Get("X-Amz-Security-Token") != ServiceSessionToken {
		return fmt.Errorf("missing or wrong X-Amz-Security-Token")
	}
	date, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	u := *r.URL
	u.Scheme, u.Host = "http", r.Host
	req, err := http.NewRequest(r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.URL.RawPath = r.URL.RawPath
	for _, h := range strings.Split(m[4], ";") {
		switch h {
		case "host", "x-amz-date", "x-amz-security-token", "content-length":
		default:
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: ServiceAccessKeyID, SecretAccessKey: ServiceSecretAccessKey, SessionToken: ServiceSessionToken}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "lambda", m[3], date); err != nil {
		return err
	}
	if req.Header.Get("Authorization") != auth {
		return fmt.Errorf("signature mismatch")
	}
	return nil
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("X-Amzn-ErrorType", typ)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "Message": msg})
}
