// Package lambdaemu is an in-process implementation of the AWS Lambda
// Runtime API (version 2018-06-01) and of the part of the Extensions API
// (2020-01-01) that aws-lambda-go's lambda.WithEnableSIGTERM uses, so tests
// can run real bootstrap binaries as child processes exactly as the
// provided.al2023 runtime would, without AWS.
//
// An Emulator queues invocations; a runtime takes them with
// GET /2018-06-01/runtime/invocation/next and answers with
// POST .../invocation/<id>/response or .../invocation/<id>/error. Every
// execution environment (one bootstrap process, see RunBootstrap) gets its
// own path prefix on the same listener, so the emulator knows which
// invocation a process holds when it exits or times out, as Lambda does.
//
// Timeouts behave like Lambda's: an invocation that has not answered by its
// deadline (plus Options.TimeoutGrace) fails with error type
// "Sandbox.Timedout", its execution environment is destroyed (the process is
// killed) and the next invocation starts a new one (a cold start).
package lambdaemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Error types the emulator itself reports, named as Lambda names them.
const (
	// ErrorTypeTimeout is the error type of an invocation that did not
	// answer before its deadline.
	ErrorTypeTimeout = "Sandbox.Timedout"
	// ErrorTypeExit is the error type of an invocation (or of an init) whose
	// runtime process exited before answering.
	ErrorTypeExit = "Runtime.ExitError"
	// ErrorTypeUnhandled is the error type of an error report that named
	// none.
	ErrorTypeUnhandled = "Unhandled"
)

// Runtime API header names.
const (
	HeaderRequestID       = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadlineMs      = "Lambda-Runtime-Deadline-Ms"
	HeaderInvokedARN      = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID         = "Lambda-Runtime-Trace-Id"
	HeaderErrorType       = "Lambda-Runtime-Function-Error-Type"
	HeaderExtensionName   = "Lambda-Extension-Name"
	HeaderExtensionID     = "Lambda-Extension-Identifier"
	runtimeAPIVersion     = "2018-06-01"
	extensionAPIVersion   = "2020-01-01"
	defaultFunctionName   = "molecule-relay-test"
	defaultTimeoutGrace   = 250 * time.Millisecond
	defaultFunctionRegion = "us-east-1"
)

// ErrClosed is returned by Invoke once the emulator has been closed.
var ErrClosed = errors.New("lambdaemu: emulator closed")

// ErrNotDispatched is returned (wrapping the context's error) when Invoke's
// context ended before any runtime took the invocation.
var ErrNotDispatched = errors.New("lambdaemu: invocation not taken by any runtime")

// Options configure an Emulator. The zero value is valid.
type Options struct {
	// FunctionName is used in the invoked function ARN. If not set,
	// "molecule-relay-test".
	FunctionName string
	// TimeoutGrace is how long after an invocation's deadline the emulator
	// still accepts its answer before failing it with ErrorTypeTimeout. If
	// not set, 250 milliseconds.
	TimeoutGrace time.Duration
}

// Result is the outcome of one invocation, as the Lambda Invoke API would
// report it.
type Result struct {
	// RequestID is the Lambda-Runtime-Aws-Request-Id of the invocation.
	RequestID string
	// Payload is the response body on success, or the error body on error.
	Payload []byte
	// ErrorType is empty on success; otherwise the errorType the runtime
	// reported (for aws-lambda-go: the Go type name of the returned error),
	// or ErrorTypeTimeout / ErrorTypeExit.
	ErrorType string
	// ErrorMessage is the errorMessage of an error.
	ErrorMessage string
	// Deadline is the deadline the runtime was given.
	Deadline time.Time
	// Duration runs from the dispatch of the invocation to its answer.
	Duration time.Duration
}

// Err returns a *FunctionError for a failed invocation, nil otherwise.
func (r Result) Err() error {
	if r.ErrorType == "" {
		return nil
	}
	return &FunctionError{RequestID: r.RequestID, Type: r.ErrorType, Message: r.ErrorMessage}
}

// FunctionError is an invocation (or init) error reported by a runtime or by
// the emulator.
type FunctionError struct {
	RequestID string
	Type      string
	Message   string
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("lambdaemu: function error %s: %s", e.Type, e.Message)
}

// errorBody is the JSON a runtime posts to /error and /init/error.
type errorBody struct {
	ErrorMessage string          `json:"errorMessage"`
	ErrorType    string          `json:"errorType"`
	StackTrace   json.RawMessage `json:"stackTrace,omitempty"`
}

type invocation struct {
	id         string
	payload    []byte
	timeout    time.Duration
	deadline   time.Time
	taken      time.Time
	dispatched chan struct{} // closed when a runtime takes it
	done       chan outcome  // buffered 1; written once under Emulator.mu
	finished   bool
}

type outcome struct {
	res Result
	err error
}

// environment is one execution environment: one runtime process.
type environment struct {
	name     string
	inflight *invocation
	calledNx bool          // the runtime called /next at least once
	shutdown chan struct{} // closed to release extension event/next
	// shutdownEvent: an extension registered for the SHUTDOWN event.
	shutdownEvent bool
	onKill        func() // destroys the environment's process (timeout)
}

// Emulator is a Lambda Runtime API server on 127.0.0.1.
type Emulator struct {
	opts Options
	ln   net.Listener
	srv  *http.Server

	mu         sync.Mutex
	queue      []*invocation
	queued     chan struct{} // closed and replaced whenever queue grows
	envs       map[string]*environment
	initErrors []*FunctionError
	closed     bool
	nextEnv    int
	busyMax    int // most environments seen holding an invocation at once
}

// Start starts an emulator on a random loopback port; it is closed at test
// cleanup.
func Start(t testing.TB, opts Options) *Emulator {
	t.Helper()
	e, err := New(opts)
	if err != nil {
		t.Fatalf("lambdaemu: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// New starts an emulator on a random loopback port. Close it when done.
func New(opts Options) (*Emulator, error) {
	if opts.FunctionName == "" {
		opts.FunctionName = defaultFunctionName
	}
	if opts.TimeoutGrace == 0 {
		opts.TimeoutGrace = defaultTimeoutGrace
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	e := &Emulator{
		opts:   opts,
		ln:     ln,
		queued: make(chan struct{}),
		envs:   map[string]*environment{"": {shutdown: make(chan struct{})}},
	}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

// Addr returns host:port of the default execution environment, the value
// for AWS_LAMBDA_RUNTIME_API of a runtime started by hand.
func (e *Emulator) Addr() string { return e.ln.Addr().String() }

// FunctionARN returns the invoked function ARN the emulator reports.
func (e *Emulator) FunctionARN() string {
	return "arn:aws:lambda:" + defaultFunctionRegion + ":000000000000:function:" + e.opts.FunctionName
}

// Close stops the server, fails every pending invocation and releases every
// blocked runtime. It is safe to call twice.
func (e *Emulator) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	for _, env := range e.envs {
		e.shutdownEnvLocked(env)
		if inv := env.inflight; inv != nil && !inv.finished {
			inv.finished = true
			inv.done <- outcome{res: Result{RequestID: inv.id}, err: ErrClosed}
		}
	}
	for _, inv := range e.queue {
		if !inv.finished {
			inv.finished = true
			inv.done <- outcome{res: Result{RequestID: inv.id}, err: ErrClosed}
		}
	}
	e.queue = nil
	close(e.queued)
	e.mu.Unlock()
	_ = e.srv.Close()
}

// InitError returns the first init error a runtime reported (by POST
// /runtime/init/error, or by exiting before it asked for an invocation), or
// nil.
func (e *Emulator) InitError() *FunctionError {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.initErrors) == 0 {
		return nil
	}
	return e.initErrors[0]
}

// InitErrors returns every init error reported so far.
func (e *Emulator) InitErrors() []*FunctionError {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*FunctionError(nil), e.initErrors...)
}

// Queued returns how many invocations wait for a runtime to take them.
func (e *Emulator) Queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, inv := range e.queue {
		if !inv.finished {
			n++
		}
	}
	return n
}

// Concurrency returns how many execution environments hold an invocation
// now, and the most that ever did at once.
func (e *Emulator) Concurrency() (now, most int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.busyLocked(), e.busyMax
}

func (e *Emulator) busyLocked() int {
	n := 0
	for name, env := range e.envs {
		if name != "" && env.inflight != nil && !env.inflight.finished {
			n++
		}
	}
	return n
}

// free returns how many execution environments hold no invocation (those
// still starting included) and how many invocations wait for one.
func (e *Emulator) free() (idle, queued int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, env := range e.envs {
		// An answered invocation frees its environment even before the
		// runtime's next /next.
		if name != "" && (env.inflight == nil || env.inflight.finished) {
			idle++
		}
	}
	for _, inv := range e.queue {
		if !inv.finished {
			queued++
		}
	}
	return idle, queued
}

// QueueChanged returns a channel that is closed the next time an
// invocation is queued (or the emulator closes).
func (e *Emulator) QueueChanged() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queued
}

// Invoke queues payload as one invocation with the given function timeout,
// waits for a runtime to take and answer it, and returns the result. A
// function error (including a timeout) is a Result with ErrorType set and a
// nil error; the error is non-nil only when no result exists: ctx ended
// before dispatch (ErrNotDispatched), or the emulator closed (ErrClosed).
// Once dispatched, the invocation ends at its deadline plus the grace, not
// at ctx's end, like a real invocation.
func (e *Emulator) Invoke(ctx context.Context, payload []byte, timeout time.Duration) (Result, error) {
	inv, err := e.enqueue(payload, timeout)
	if err != nil {
		return Result{}, err
	}
	return e.await(ctx, inv)
}

// enqueue queues one invocation for the next runtime that asks.
func (e *Emulator) enqueue(payload []byte, timeout time.Duration) (*invocation, error) {
	if timeout <= 0 {
		timeout = 3 * time.Second // Lambda's default function timeout
	}
	inv := &invocation{id: newID(), payload: payload, timeout: timeout,
		dispatched: make(chan struct{}), done: make(chan outcome, 1)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	e.queue = append(e.queue, inv)
	close(e.queued)
	e.queued = make(chan struct{})
	return inv, nil
}

// await waits for inv's outcome as Invoke describes.
func (e *Emulator) await(ctx context.Context, inv *invocation) (Result, error) {
	select {
	case o := <-inv.done: // failed before dispatch: init error, close
		return o.res, o.err
	case <-inv.dispatched:
	case <-ctx.Done():
		e.mu.Lock()
		if inv.taken.IsZero() && !inv.finished {
			inv.finished = true
			e.mu.Unlock()
			return Result{RequestID: inv.id}, fmt.Errorf("%w: %w", ErrNotDispatched, ctx.Err())
		}
		e.mu.Unlock()
		// Taken meanwhile: from here on only the deadline counts.
		select {
		case <-inv.dispatched:
		case o := <-inv.done:
			return o.res, o.err
		}
	}
	e.mu.Lock()
	deadline := inv.deadline
	e.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline.Add(e.opts.TimeoutGrace)))
	defer timer.Stop()
	select {
	case o := <-inv.done:
		return o.res, o.err
	case <-timer.C:
	}
	e.mu.Lock()
	var kill func()
	if !inv.finished {
		for _, env := range e.envs {
			if env.inflight == inv {
				env.inflight = nil
				kill = env.onKill
			}
		}
		e.finishLocked(inv, Result{
			RequestID:    inv.id,
			ErrorType:    ErrorTypeTimeout,
			ErrorMessage: fmt.Sprintf("Task timed out after %.2f seconds", inv.timeout.Seconds()),
			Deadline:     inv.deadline,
			Duration:     time.Since(inv.taken),
		})
	}
	e.mu.Unlock()
	if kill != nil {
		// Lambda destroys an execution environment whose invocation timed
		// out; the next invocation gets a fresh one.
		kill()
	}
	o := <-inv.done
	return o.res, o.err
}

func (e *Emulator) finishLocked(inv *invocation, r Result) {
	if inv.finished {
		return
	}
	inv.finished = true
	inv.done <- outcome{res: r}
}

// newEnvironment registers an execution environment and returns the
// AWS_LAMBDA_RUNTIME_API value for it.
func (e *Emulator) newEnvironment(onKill func()) (string, *environment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextEnv++
	env := &environment{name: "env" + strconv.Itoa(e.nextEnv), shutdown: make(chan struct{}), onKill: onKill}
	e.envs[env.name] = env
	return e.Addr() + "/" + env.name, env
}

// shutdownEnv releases the environment's blocked extension calls (the
// SHUTDOWN event) before its process is signalled.
func (e *Emulator) shutdownEnv(env *environment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdownEnvLocked(env)
}

func (e *Emulator) shutdownEnvLocked(env *environment) {
	select {
	case <-env.shutdown:
	default:
		close(env.shutdown)
	}
}

// envExited records that env's process exited: an invocation it held fails
// with ErrorTypeExit, and an exit before the first /next is an init error.
func (e *Emulator) envExited(env *environment, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.envs, env.name)
	if inv := env.inflight; inv != nil {
		env.inflight = nil
		e.finishLocked(inv, Result{
			RequestID: inv.id, ErrorType: ErrorTypeExit, ErrorMessage: reason,
			Deadline: inv.deadline, Duration: time.Since(inv.taken),
		})
	}
	if !env.calledNx {
		e.recordInitErrorLocked(&FunctionError{Type: ErrorTypeExit, Message: reason})
	}
}

func (e *Emulator) recordInitErrorLocked(fe *FunctionError) {
	e.initErrors = append(e.initErrors, fe)
	// Lambda fails the invocation that triggered the init with the init's
	// error: fail the oldest one nobody has taken.
	for i, inv := range e.queue {
		if !inv.finished {
			e.queue = append(e.queue[:i:i], e.queue[i+1:]...)
			e.finishLocked(inv, Result{RequestID: inv.id, ErrorType: fe.Type, ErrorMessage: fe.Message})
			return
		}
	}
}

func (e *Emulator) serve(w http.ResponseWriter, r *http.Request) {
	envName, rest := "", r.URL.Path
	if p := strings.TrimPrefix(rest, "/"); strings.HasPrefix(p, "env") {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		envName, rest = p[:i], p[i:]
	}
	e.mu.Lock()
	env := e.envs[envName]
	e.mu.Unlock()
	if env == nil {
		writeJSONError(w, http.StatusForbidden, "Unknown execution environment", "Runtime.UnknownEnvironment")
		return
	}
	switch {
	case r.Method == http.MethodGet && rest == "/"+runtimeAPIVersion+"/runtime/invocation/next":
		e.next(w, r, env)
	case r.Method == http.MethodPost && rest == "/"+runtimeAPIVersion+"/runtime/init/error":
		e.initError(w, r, env)
	case r.Method == http.MethodPost && strings.HasPrefix(rest, "/"+runtimeAPIVersion+"/runtime/invocation/"):
		tail := strings.TrimPrefix(rest, "/"+runtimeAPIVersion+"/runtime/invocation/")
		id, kind, ok := strings.Cut(tail, "/")
		if !ok || (kind != "response" && kind != "error") {
			http.NotFound(w, r)
			return
		}
		e.answer(w, r, env, id, kind == "error")
	case r.Method == http.MethodPost && rest == "/"+extensionAPIVersion+"/extension/register":
		var reg struct {
			Events []string `json:"events"`
		}
		_ = json.NewDecoder(r.Body).Decode(&reg)
		if slices.Contains(reg.Events, "SHUTDOWN") {
			e.mu.Lock()
			env.shutdownEvent = true
			e.mu.Unlock()
		}
		w.Header().Set(HeaderExtensionID, newID())
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"functionName":"`+e.opts.FunctionName+`","functionVersion":"$LATEST","handler":"bootstrap"}`)
	case r.Method == http.MethodGet && rest == "/"+extensionAPIVersion+"/extension/event/next":
		// An extension registered for no events (aws-lambda-go's SIGTERM
		// enabler) is never answered; one registered for SHUTDOWN gets it
		// when the environment ends.
		e.mu.Lock()
		wants := env.shutdownEvent
		e.mu.Unlock()
		if !wants {
			<-r.Context().Done()
			return
		}
		select {
		case <-env.shutdown:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"eventType":"SHUTDOWN","shutdownReason":"spindown","deadlineMs":%d}`, time.Now().Add(ShutdownGrace).UnixMilli())
		case <-r.Context().Done():
		}
	default:
		http.NotFound(w, r)
	}
}

func (e *Emulator) next(w http.ResponseWriter, r *http.Request, env *environment) {
	for {
		e.mu.Lock()
		env.calledNx = true
		if e.closed {
			e.mu.Unlock()
			writeJSONError(w, http.StatusServiceUnavailable, "emulator closed", "ServiceException")
			return
		}
		// Calling /next completes the previous invocation's lifecycle.
		env.inflight = nil
		var inv *invocation
		for len(e.queue) > 0 {
			cand := e.queue[0]
			e.queue = e.queue[1:]
			if !cand.finished {
				inv = cand
				break
			}
		}
		if inv != nil {
			inv.taken = time.Now()
			inv.deadline = inv.taken.Add(inv.timeout)
			env.inflight = inv
			close(inv.dispatched)
			e.busyMax = max(e.busyMax, e.busyLocked())
			e.mu.Unlock()
			h := w.Header()
			h.Set(HeaderRequestID, inv.id)
			h.Set(HeaderDeadlineMs, strconv.FormatInt(inv.deadline.UnixMilli(), 10))
			h.Set(HeaderInvokedARN, e.FunctionARN())
			h.Set(HeaderTraceID, "Root=1-"+strconv.FormatInt(inv.taken.Unix(), 16)+"-"+hexID(12)+";Parent="+hexID(8)+";Sampled=0")
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(inv.payload)
			return
		}
		wait := e.queued
		e.mu.Unlock()
		select {
		case <-wait:
		case <-env.shutdown:
			<-r.Context().Done()
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (e *Emulator) answer(w http.ResponseWriter, r *http.Request, env *environment, id string, isError bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "cannot read body", "InvalidRequest")
		return
	}
	e.mu.Lock()
	inv := env.inflight
	if inv == nil || inv.id != id || inv.finished {
		e.mu.Unlock()
		writeJSONError(w, http.StatusBadRequest, "Invalid request ID", "InvalidRequestID")
		return
	}
	res := Result{RequestID: id, Payload: body, Deadline: inv.deadline, Duration: time.Since(inv.taken)}
	if isError {
		res.ErrorType, res.ErrorMessage = parseErrorReport(r, body)
	}
	e.finishLocked(inv, res)
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

func (e *Emulator) initError(w http.ResponseWriter, r *http.Request, env *environment) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "cannot read body", "InvalidRequest")
		return
	}
	typ, msg := parseErrorReport(r, body)
	e.mu.Lock()
	if env.calledNx {
		e.mu.Unlock()
		writeJSONError(w, http.StatusForbidden, "Init error reported after init", "InvalidStateTransition")
		return
	}
	env.calledNx = true // no exit-time init error on top of this one
	e.recordInitErrorLocked(&FunctionError{Type: typ, Message: msg})
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

// parseErrorReport takes the error type from the body's errorType, else the
// Lambda-Runtime-Function-Error-Type header or trailer (aws-lambda-go sets
// the trailer only when it fails to stream a response), else "Unhandled".
func parseErrorReport(r *http.Request, body []byte) (typ, msg string) {
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil {
		typ, msg = eb.ErrorType, eb.ErrorMessage
	}
	if typ == "" {
		typ = r.Header.Get(HeaderErrorType)
	}
	if typ == "" && r.Trailer != nil {
		typ = r.Trailer.Get(HeaderErrorType)
	}
	if typ == "" {
		typ = ErrorTypeUnhandled
	}
	return typ, msg
}

func writeJSONError(w http.ResponseWriter, code int, msg, typ string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{ErrorMessage: msg, ErrorType: typ})
}

func newID() string {
	s := hexID(16)
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

func hexID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
