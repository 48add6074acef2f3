package lambdaemu_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/lambdainvoke"
	"github.com/molecule-ai/molecule-relay/internal/testkit/lambdaemu"
)

func serviceClient(t *testing.T, svc *lambdaemu.Service, secret string) *lambdainvoke.Client {
	t.Helper()
	env := map[string]string{"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_LAMBDA": svc.URL(),
		"AWS_ACCESS_KEY_ID": lambdaemu.ServiceAccessKeyID, "AWS_SECRET_ACCESS_KEY": secret,
		"AWS_SESSION_TOKEN": lambdaemu.ServiceSessionToken}
	c, err := lambdainvoke.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServiceInvokeAPI: the Invoke API answers RequestResponse with the
// payload (200) and Event with 202, by name, partial ARN or ARN; an
// unknown function is a 404 ResourceNotFoundException; a request signed
// with the wrong secret is refused.
func TestServiceInvokeAPI(t *testing.T) {
	svc := lambdaemu.StartService(t)
	fn := svc.AddFunction(lambdaemu.FunctionConfig{Name: "echo", Bootstrap: echofnBin, Timeout: 5 * time.Second})
	c := serviceClient(t, svc, lambdaemu.ServiceSecretAccessKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for _, name := range []string{"echo", "000000000000:function:echo", fn.ARN(), fn.ARN() + ":$LATEST"} {
		var out []byte
		out, err = c.Invoke(ctx, name, lambdainvoke.RequestResponse, []byte(`{"text":"hi"}`))
		var r echoResponse
		if err != nil || json.Unmarshal(out, &r) != nil || r.Text != "hi" || r.FuncName != "echo" {
			t.Fatalf("RequestResponse %s: %q %v", name, out, err)
		}
	}
	if out, err := c.Invoke(ctx, fn.ARN(), lambdainvoke.Event, []byte(`{"text":"async"}`)); err != nil || len(out) != 0 {
		t.Fatalf("Event: %q %v", out, err)
	}
	_, err = c.Invoke(ctx, "nope", lambdainvoke.Event, nil)
	var ae *lambdainvoke.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Type != "ResourceNotFoundException" {
		t.Fatalf("unknown function: %v", err)
	}
	_, err = serviceClient(t, svc, "wrong-secret").Invoke(ctx, "echo", lambdainvoke.Event, nil)
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || svc.BadSignatures() != 1 {
		t.Fatalf("wrong secret: %v (bad signatures %d)", err, svc.BadSignatures())
	}
	// The Event invocation ran (asynchronously) in the same environment.
	calls, err := fn.WaitCalls(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if last := calls[len(calls)-1]; last.Type != "Event" || last.Result.Err() != nil || !strings.Contains(string(last.Result.Payload), "async") {
		t.Fatalf("async call: %+v", last)
	}
	if fn.Environments() != 1 {
		t.Errorf("%d environments for sequential invocations, want 1", fn.Environments())
	}
}

// TestServiceConcurrency: concurrent invocations get separate execution
// environments (processes), bounded by the reserved concurrency; those
// beyond it wait and run when one frees up.
func TestServiceConcurrency(t *testing.T) {
	svc := lambdaemu.StartService(t)
	fn := svc.AddFunction(lambdaemu.FunctionConfig{Name: "slow", Bootstrap: echofnBin, Timeout: 1500 * time.Millisecond, ReservedConcurrency: 3})
	var wg sync.WaitGroup
	pids := map[int]bool{}
	var mu sync.Mutex
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := fn.Invoke(ctx, []byte(`{"mode":"wait"}`))
			var r echoResponse
			if err != nil || res.Err() != nil || json.Unmarshal(res.Payload, &r) != nil {
				t.Errorf("invoke: %v %v", err, res.Err())
				return
			}
			mu.Lock()
			pids[r.PID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	_, most := fn.Emulator().Concurrency()
	if fn.Environments() != 3 || len(pids) != 3 || most != 3 {
		t.Errorf("%d environments, %d processes answered, %d at once; want 3 each (the reserved concurrency)", fn.Environments(), len(pids), most)
	}
}
