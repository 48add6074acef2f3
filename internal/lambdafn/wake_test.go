package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/caarlos0/env/v11"
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/lambdainvoke"
)

func TestFanOutCount(t *testing.T) {
	tests := []struct {
		pending, ackPending   uint64
		per, most, self, want int
	}{
		{0, 0, 16, 10, 1, 0},         // nothing queued
		{1, 0, 16, 10, 1, 0},         // this invocation suffices
		{1000, 0, 16, 10, 1, 9},      // a burst: up to the bound, this one included
		{1000, 0, 16, 1, 1, 0},       // one at a time
		{40, 0, 16, 10, 1, 2},        // 3 invocations' worth
		{1000, 16 * 9, 16, 10, 1, 0}, // nine at work already, plus this one
		{1000, 16 * 4, 16, 10, 1, 5}, // four at work
		{5, 0, 0, 10, 1, 4},          // a zero capacity counts as 1
		// Hand-over (self 0: this invocation is ending).
		{0, 3, 16, 10, 0, 0},       // nothing undelivered
		{500, 0, 16, 1, 0, 1},      // one at a time: the next one
		{500, 16, 16, 1, 0, 1},     // another holds messages: still one more queued
		{500, 0, 16, 10, 0, 10},    // the backlog's worth
		{500, 16 * 3, 16, 4, 0, 1}, // three at work, bound 4
	}
	for _, tc := range tests {
		if got := fanOutCount(tc.pending, tc.ackPending, tc.per, tc.most, tc.self); got != tc.want {
			t.Errorf("fanOutCount(%d, %d, %d, %d, %d) = %d, want %d", tc.pending, tc.ackPending, tc.per, tc.most, tc.self, got, tc.want)
		}
	}
}

// TestLambdaLogger: with the function's JSON logging configuration the
// logger is lambdacontext's (its variables are read when the package is
// initialised, so a child process runs it): AWS_LAMBDA_LOG_LEVEL and
// AWS_LAMBDA_LOG_FORMAT win over MOLECULE_LOG_*, and a line logged with an
// invocation's context carries its request id. Without them,
// MOLECULE_LOG_* decide.
func TestLambdaLogger(t *testing.T) {
	if os.Getenv("LAMBDAFN_TEST_LOGGER") == "1" {
		log := lambdaLogger(os.Stderr, os.Getenv).With("stage", "poller")
		log.Warn("before any invocation")
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
		log.InfoContext(ctx, "filtered by AWS_LAMBDA_LOG_LEVEL")
		log.WarnContext(ctx, "inside", "n", 1)
		log.ErrorContext(ctx, "with a context")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLambdaLogger$")
	cmd.Env = append(os.Environ(), "LAMBDAFN_TEST_LOGGER=1", "MOLECULE_LOG_LEVEL=debug", "MOLECULE_LOG_FORMAT=text",
		"AWS_LAMBDA_LOG_LEVEL=WARN", "AWS_LAMBDA_LOG_FORMAT=JSON")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (the info line filtered):\n%s", len(lines), out)
	}
	want := []string{"", "req-1", "req-1"}
	for i, m := range lines {
		id, _ := m["requestId"].(string)
		if id != want[i] || m["message"] == nil || m["timestamp"] == nil || m["stage"] != "poller" {
			t.Errorf("line %d: %v; want requestId %q, message, timestamp and stage", i, m, want[i])
		}
	}
	// Without the Lambda variables, MOLECULE_LOG_* decide.
	var buf bytes.Buffer
	env := map[string]string{"MOLECULE_LOG_LEVEL": "debug", "MOLECULE_LOG_FORMAT": "text"}
	log := lambdaLogger(&buf, func(k string) string { return env[k] })
	log.Debug("debug line")
	if s := buf.String(); !strings.Contains(s, "msg=\"debug line\"") || !strings.Contains(s, "level=DEBUG") {
		t.Errorf("text output %q", s)
	}
	// Lambda's Text format, with a level: text at that level.
	buf.Reset()
	env = map[string]string{"MOLECULE_LOG_LEVEL": "debug", "MOLECULE_LOG_FORMAT": "json", "AWS_LAMBDA_LOG_FORMAT": "Text", "AWS_LAMBDA_LOG_LEVEL": "WARN"}
	log = lambdaLogger(&buf, func(k string) string { return env[k] })
	log.Info("filtered")
	log.Warn("kept")
	if s := buf.String(); strings.Contains(s, "filtered") || !strings.Contains(s, "level=WARN msg=kept") {
		t.Errorf("text output %q", s)
	}
}

// TestFitsFailsLoudly: a dispatcher whose handler timeout cannot fit, and a
// replier whose invocation is shorter than its notify timeout plus
// margins, fail with a ConfigError naming the variables and the numbers.
func TestFitsFailsLoudly(t *testing.T) {
	tests := []struct {
		stage   Stage
		timeout time.Duration
		want    []string // in the message; nil: fits
	}{
		{Dispatcher, 20 * time.Second, []string{"MOLECULE_HANDLER_TIMEOUT 1m0s", "MOLECULE_DRAIN_MARGIN 3s", "at least 1m5s"}},
		{Dispatcher, 70 * time.Second, nil},
		{Replier, 20 * time.Second, []string{"30s notify timeout", "MOLECULE_DRAIN_MARGIN 3s", "at least 35s"}},
		{Replier, 40 * time.Second, nil},
		{Poller, time.Second, nil},
	}
	for _, tc := range tests {
		f := &Function{stage: tc.stage, cfg: &config.Config{HandlerTimeout: config.Seconds(time.Minute)}}
		f.set.Margin = config.Seconds(3 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
		err := f.fits(ctx)
		cancel()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s %s: %v", tc.stage, tc.timeout, err)
			}
			continue
		}
		ce, ok := err.(*ConfigError)
		if !ok {
			t.Errorf("%s %s: %v, want a ConfigError", tc.stage, tc.timeout, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(ce.Error(), w) {
				t.Errorf("%s %s: %q does not say %q", tc.stage, tc.timeout, ce.Error(), w)
			}
		}
	}
}

// TestWakeSettings: the settings parse with their defaults, and the
// wake-ups each stage sends follow the variables.
func TestWakeSettings(t *testing.T) {
	aws := []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKID", "AWS_SECRET_ACCESS_KEY=secret", "AWS_LAMBDA_FUNCTION_NAME=relay-dispatcher"}
	tests := []struct {
		stage                 Stage
		env                   []string
		dispatcher, repl, own string // functions woken, "" none
		wantErr               string
	}{
		{Poller, aws, "", "", "", ""},
		{Poller, append(aws, "MOLECULE_DISPATCHER_FUNCTION=arn:aws:lambda:us-east-1:1:function:d"), "arn:aws:lambda:us-east-1:1:function:d", "", "", ""},
		{Dispatcher, append(aws, "MOLECULE_REPLIER_FUNCTION=r"), "", "r", "", ""},
		{Dispatcher, append(aws, "MOLECULE_DISPATCHER_FANOUT=4"), "", "", "relay-dispatcher", ""},
		{Dispatcher, []string{"MOLECULE_DISPATCHER_FANOUT=-1"}, "", "", "", "MOLECULE_DISPATCHER_FANOUT"},
		{Dispatcher, []string{"MOLECULE_DISPATCHER_FANOUT=1"}, "", "", "", "AWS_LAMBDA_FUNCTION_NAME"},
		{Dispatcher, []string{"MOLECULE_DISPATCHER_FANOUT=1", "AWS_LAMBDA_FUNCTION_NAME=d"}, "", "", "", "AWS_REGION"},
		{Dispatcher, []string{"MOLECULE_REPLIER_FUNCTION=r"}, "", "", "", "AWS_REGION"},
		{Replier, append(aws, "MOLECULE_REPLIER_FUNCTION=r", "MOLECULE_DISPATCHER_FUNCTION=d"), "", "", "", ""},
	}
	for i, tc := range tests {
		f := New(tc.stage, tc.env, slog.Default())
		var set lambdaSettings
		m := env.ToMap(tc.env)
		if err := env.ParseWithOptions(&set, env.Options{Environment: m}); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if set.Wake.WakeInterval.D() != time.Second || set.Margin.D() != 3*time.Second || !set.PollerWindow {
			t.Errorf("%d: defaults not applied: %+v", i, set)
		}
		w, err := newWakers(f.stage, set.Wake, m, f.log)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%d: err %v, want one naming %s", i, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		name := func(k *lambdainvoke.Waker) string {
			if k == nil {
				return ""
			}
			return k.Function()
		}
		if name(w.dispatcher) != tc.dispatcher || name(w.replier) != tc.repl || name(w.self) != tc.own {
			t.Errorf("%d: wakes %q %q %q, want %q %q %q", i, name(w.dispatcher), name(w.replier), name(w.self), tc.dispatcher, tc.repl, tc.own)
		}
	}
}
