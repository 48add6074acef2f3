package lambdaemu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/lambdaemu"
)

// echofnBin is the testdata/echofn bootstrap, built once by TestMain the
// way the functions are built for Lambda.
var echofnBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lambdaemu-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echofnBin = filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", echofnBin, "./testdata/echofn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build echofn: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type echoResponse struct {
	Text        string `json:"text"`
	RequestID   string `json:"request_id"`
	ARN         string `json:"arn"`
	DeadlineMs  int64  `json:"deadline_ms"`
	PID         int    `json:"pid"`
	Invocations int64  `json:"invocations"`
	FuncName    string `json:"function_name"`
	Memory      int    `json:"memory"`
	Handler     string `json:"handler"`
}

func invoke(t *testing.T, emu *lambdaemu.Emulator, mode, text string, timeout time.Duration) lambdaemu.Result {
	t.Helper()
	payload, _ := json.Marshal(map[string]string{"mode": mode, "text": text})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := emu.Invoke(ctx, payload, timeout)
	if err != nil {
		t.Fatalf("invoke %s: %v", mode, err)
	}
	return res
}

func decodeEcho(t *testing.T, res lambdaemu.Result) echoResponse {
	t.Helper()
	if err := res.Err(); err != nil {
		t.Fatalf("invocation failed: %v (payload %s)", err, res.Payload)
	}
	var r echoResponse
	if err := json.Unmarshal(res.Payload, &r); err != nil {
		t.Fatalf("decode %q: %v", res.Payload, err)
	}
	return r
}

func TestInvokeResponse(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{FunctionName: "echo-fn"})
	lambdaemu.RunBootstrap(t, emu, echofnBin, nil)

	res := invoke(t, emu, "echo", "hello", 5*time.Second)
	r := decodeEcho(t, res)
	want := echoResponse{
		Text: "hello", RequestID: res.RequestID, ARN: emu.FunctionARN(), DeadlineMs: res.Deadline.UnixMilli(),
		PID: r.PID, Invocations: 1, FuncName: "echo-fn", Memory: 128, Handler: "bootstrap",
	}
	if r != want {
		t.Errorf("response\n got %+v\nwant %+v", r, want)
	}
	if !strings.HasSuffix(r.ARN, ":function:echo-fn") {
		t.Errorf("ARN %q does not name the function", r.ARN)
	}
}

func TestErrorTypeIsGoTypeName(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	lambdaemu.RunBootstrap(t, emu, echofnBin, nil)

	// aws-lambda-go reports reflect.TypeOf(err).Elem().Name() for a pointer
	// error, so only the outermost type counts: a %w wrapper hides ours.
	tests := []struct {
		mode, wantType, wantMsg string
	}{
		{"fail", "EchoError", "echofn failed: boom"},
		{"wrapped", "wrapError", "wrapped: echofn failed: boom"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			res := invoke(t, emu, tc.mode, "boom", 5*time.Second)
			if res.ErrorType != tc.wantType || res.ErrorMessage != tc.wantMsg {
				t.Errorf("got (%q, %q), want (%q, %q)", res.ErrorType, res.ErrorMessage, tc.wantType, tc.wantMsg)
			}
			var fe *lambdaemu.FunctionError
			if !errors.As(res.Err(), &fe) || fe.Type != tc.wantType {
				t.Errorf("Err() = %v, want *FunctionError of type %s", res.Err(), tc.wantType)
			}
		})
	}
	// The environment survives a handled error.
	if r := decodeEcho(t, invoke(t, emu, "echo", "after", 5*time.Second)); r.Invocations != 3 {
		t.Errorf("invocations after errors = %d, want 3 (same process)", r.Invocations)
	}
}

func TestDeadlineHonoured(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	lambdaemu.RunBootstrap(t, emu, echofnBin, nil)

	const timeout = 1200 * time.Millisecond
	r := decodeEcho(t, invoke(t, emu, "echo", "", timeout))
	res := invoke(t, emu, "wait", "", timeout)
	w := decodeEcho(t, res)
	if got, want := w.DeadlineMs, res.Deadline.UnixMilli(); got != want {
		t.Errorf("function's ctx deadline = %d, header deadline = %d", got, want)
	}
	// "wait" answers 100 ms before the deadline it was given: the duration
	// proves the function saw the emulator's deadline, not its own clock.
	if res.Duration < timeout-400*time.Millisecond || res.Duration > timeout {
		t.Errorf("wait took %s, want about %s", res.Duration, timeout-100*time.Millisecond)
	}
	if r.PID != w.PID {
		t.Errorf("pid changed between invocations: %d → %d", r.PID, w.PID)
	}
}

func TestTimeoutDestroysEnvironment(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{TimeoutGrace: 50 * time.Millisecond})
	p := lambdaemu.RunBootstrap(t, emu, echofnBin, nil)

	first := decodeEcho(t, invoke(t, emu, "echo", "", 5*time.Second))
	res := invoke(t, emu, "hang", "", 300*time.Millisecond)
	if res.ErrorType != lambdaemu.ErrorTypeTimeout {
		t.Fatalf("hang: error type %q, want %q", res.ErrorType, lambdaemu.ErrorTypeTimeout)
	}
	if !strings.Contains(res.ErrorMessage, "Task timed out after 0.30 seconds") {
		t.Errorf("timeout message %q", res.ErrorMessage)
	}
	after := decodeEcho(t, invoke(t, emu, "echo", "", 5*time.Second))
	if after.PID == first.PID || after.Invocations != 1 {
		t.Errorf("after a timeout: pid %d (was %d), invocations %d; want a fresh process", after.PID, first.PID, after.Invocations)
	}
	if p.Starts() != 2 {
		t.Errorf("starts = %d, want 2", p.Starts())
	}
}

func TestWarmInvocationsShareProcess(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	p := lambdaemu.RunBootstrap(t, emu, echofnBin, nil)

	a := decodeEcho(t, invoke(t, emu, "echo", "a", 5*time.Second))
	b := decodeEcho(t, invoke(t, emu, "echo", "b", 5*time.Second))
	if a.PID != b.PID || a.Invocations != 1 || b.Invocations != 2 || a.RequestID == b.RequestID {
		t.Errorf("not one warm process: %+v then %+v", a, b)
	}
	if p.Starts() != 1 {
		t.Errorf("starts = %d, want 1", p.Starts())
	}
}

func TestInitError(t *testing.T) {
	tests := []struct {
		init, wantType string
	}{
		{"post", "EchoInitError"},
		{"exit", lambdaemu.ErrorTypeExit},
	}
	for _, tc := range tests {
		t.Run(tc.init, func(t *testing.T) {
			emu := lambdaemu.Start(t, lambdaemu.Options{})
			// The invocation is queued first: it is the one that triggers
			// the init, and fails with the init's error.
			done := make(chan lambdaemu.Result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := emu.Invoke(ctx, []byte(`{}`), 5*time.Second)
				if err != nil {
					res.ErrorType = "invoke error: " + err.Error()
				}
				done <- res
			}()
			// Wait until it is queued: the emulator refuses a /next of an
			// unknown environment, so probe the queue by hand.
			waitQueued(t, emu)
			p := lambdaemu.RunBootstrap(t, emu, echofnBin, []string{"ECHOFN_INIT=" + tc.init})
			res := <-done
			if res.ErrorType != tc.wantType {
				t.Errorf("invocation error type %q, want %q", res.ErrorType, tc.wantType)
			}
			<-p.Exited()
			ie := emu.InitError()
			if ie == nil || ie.Type != tc.wantType {
				t.Fatalf("InitError() = %v, want type %s", ie, tc.wantType)
			}
			if n := len(emu.InitErrors()); n != 1 {
				t.Errorf("%d init errors, want 1", n)
			}
		})
	}
}

// waitQueued blocks until the emulator holds at least one invocation no
// runtime has taken yet.
func waitQueued(t *testing.T, emu *lambdaemu.Emulator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for emu.Queued() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("invocation never queued")
		}
		select {
		case <-emu.QueueChanged():
		case <-time.After(time.Until(deadline)):
		}
	}
}

func TestSIGTERMReachesHandler(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	p := lambdaemu.RunBootstrap(t, emu, echofnBin, nil)
	decodeEcho(t, invoke(t, emu, "echo", "", 5*time.Second))

	p.Stop()
	out := p.Output()
	if !strings.Contains(out, "echofn: SIGTERM received, draining") {
		t.Errorf("SIGTERM handler did not run; output:\n%s", out)
	}
	if strings.Contains(out, "Failed to register internal extension") {
		t.Errorf("extension registration failed; output:\n%s", out)
	}
	if err := p.ExitErr(); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
}

func TestInvokeNotDispatched(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := emu.Invoke(ctx, []byte(`{}`), time.Second)
	if !errors.Is(err, lambdaemu.ErrNotDispatched) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotDispatched wrapping DeadlineExceeded", err)
	}
	// A cancelled invocation is never handed to a runtime that comes later.
	lambdaemu.RunBootstrap(t, emu, echofnBin, nil)
	if r := decodeEcho(t, invoke(t, emu, "echo", "second", 5*time.Second)); r.Text != "second" || r.Invocations != 1 {
		t.Errorf("first invocation the runtime saw: %+v, want the second one", r)
	}
	emu.Close()
	if _, err := emu.Invoke(context.Background(), nil, time.Second); !errors.Is(err, lambdaemu.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestRuntimeAPIByHand speaks the Runtime API over raw HTTP against the
// default environment (Addr), as a runtime other than aws-lambda-go would.
func TestRuntimeAPIByHand(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{FunctionName: "by-hand"})
	base := "http://" + emu.Addr() + "/2018-06-01/runtime/"

	type answer struct {
		path, errHeader, body string
		wantType, wantMsg     string
	}
	tests := []struct {
		name string
		a    answer
	}{
		{"response", answer{"response", "", `{"ok":true}`, "", ""}},
		{"error body", answer{"error", "", `{"errorType":"BodyType","errorMessage":"m1","stackTrace":[]}`, "BodyType", "m1"}},
		{"error header only", answer{"error", "HeaderType", `not json`, "HeaderType", ""}},
		{"error untyped", answer{"error", "", `{}`, lambdaemu.ErrorTypeUnhandled, ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan lambdaemu.Result, 1)
			go func() {
				res, err := emu.Invoke(context.Background(), []byte(`{"n":1}`), 10*time.Second)
				if err != nil {
					res.ErrorType = err.Error()
				}
				done <- res
			}()
			resp, err := http.Get(base + "invocation/next")
			if err != nil {
				t.Fatal(err)
			}
			payload, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id := resp.Header.Get(lambdaemu.HeaderRequestID)
			dl, err := strconv.ParseInt(resp.Header.Get(lambdaemu.HeaderDeadlineMs), 10, 64)
			if err != nil || id == "" || string(payload) != `{"n":1}` {
				t.Fatalf("next: id %q deadline %q payload %q", id, resp.Header.Get(lambdaemu.HeaderDeadlineMs), payload)
			}
			if left := time.Until(time.UnixMilli(dl)); left < 9*time.Second || left > 10*time.Second {
				t.Errorf("deadline %s away, want about 10s", left)
			}
			if got := resp.Header.Get(lambdaemu.HeaderInvokedARN); got != emu.FunctionARN() {
				t.Errorf("ARN header %q", got)
			}
			if !strings.HasPrefix(resp.Header.Get(lambdaemu.HeaderTraceID), "Root=1-") {
				t.Errorf("trace header %q", resp.Header.Get(lambdaemu.HeaderTraceID))
			}
			req, _ := http.NewRequest(http.MethodPost, base+"invocation/"+id+"/"+tc.a.path, bytes.NewBufferString(tc.a.body))
			if tc.a.errHeader != "" {
				req.Header.Set(lambdaemu.HeaderErrorType, tc.a.errHeader)
			}
			post, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			post.Body.Close()
			if post.StatusCode != http.StatusAccepted {
				t.Errorf("post status %d, want 202", post.StatusCode)
			}
			res := <-done
			if res.ErrorType != tc.a.wantType || res.ErrorMessage != tc.a.wantMsg || string(res.Payload) != tc.a.body {
				t.Errorf("result %+v", res)
			}
			// A second answer for the same id is refused.
			again, err := http.Post(base+"invocation/"+id+"/response", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			again.Body.Close()
			if again.StatusCode != http.StatusBadRequest {
				t.Errorf("second answer: status %d, want 400", again.StatusCode)
			}
		})
	}
}

// TestColdStart measures process start → first response of the echofn
// bootstrap five times and logs the median. It asserts nothing about the
// figure; it is here to be read (go test -v -run ColdStart).
func TestColdStart(t *testing.T) {
	emu := lambdaemu.Start(t, lambdaemu.Options{})
	var ds []time.Duration
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		done := make(chan error, 1)
		go func() {
			res, err := emu.Invoke(ctx, []byte(`{"mode":"echo"}`), 5*time.Second)
			if err == nil {
				err = res.Err()
			}
			done <- err
		}()
		waitQueued(t, emu)
		start := time.Now()
		p := lambdaemu.RunBootstrap(t, emu, echofnBin, nil)
		err := <-done
		ds = append(ds, time.Since(start))
		cancel()
		if err != nil {
			t.Fatalf("cold invocation: %v", err)
		}
		p.Stop()
	}
	slices.Sort(ds)
	t.Logf("echofn cold start (process start → first response), median of %d: %s (all: %v)", len(ds), ds[len(ds)/2], ds)
}
