// Command echofn is a tiny Lambda function for the emulator's tests. Its
// behaviour is chosen by the payload's "mode":
//
//	echo     answer with what the runtime handed over (default)
//	fail     return an *EchoError (errorType "EchoError")
//	wrapped  return fmt.Errorf("...: %w", *EchoError) (errorType "wrapError")
//	wait     wait until 100 ms before the deadline, then answer
//	hang     never answer, ignoring the context
//
// ECHOFN_INIT=post makes it report an init error by the Runtime API and
// exit; ECHOFN_INIT=exit makes it exit without a word.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// EchoError is the named error type the "fail" mode returns.
type EchoError struct{ Reason string }

func (e *EchoError) Error() string { return "echofn failed: " + e.Reason }

type request struct {
	Mode string `json:"mode"`
	Text string `json:"text"`
}

type response struct {
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

var invocations atomic.Int64

func handle(ctx context.Context, req request) (response, error) {
	n := invocations.Add(1)
	lc, _ := lambdacontext.FromContext(ctx)
	dl, _ := ctx.Deadline()
	resp := response{
		Text: req.Text, RequestID: lc.AwsRequestID, ARN: lc.InvokedFunctionArn,
		DeadlineMs: dl.UnixMilli(), PID: os.Getpid(), Invocations: n,
		FuncName: lambdacontext.FunctionName, Memory: lambdacontext.MemoryLimitInMB,
		Handler: os.Getenv("_HANDLER"),
	}
	switch req.Mode {
	case "fail":
		return response{}, &EchoError{Reason: req.Text}
	case "wrapped":
		return response{}, fmt.Errorf("wrapped: %w", &EchoError{Reason: req.Text})
	case "wait":
		t := time.NewTimer(time.Until(dl.Add(-100 * time.Millisecond)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return response{}, ctx.Err()
		}
	case "hang":
		select {}
	}
	return resp, nil
}

func postInitError() {
	body, _ := json.Marshal(map[string]string{"errorType": "EchoInitError", "errorMessage": "echofn: configured to fail init"})
	url := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/init/error"
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Lambda-Runtime-Function-Error-Type", "EchoInitError")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

func main() {
	switch os.Getenv("ECHOFN_INIT") {
	case "post":
		postInitError()
		os.Exit(1)
	case "exit":
		fmt.Fprintln(os.Stderr, "echofn: exiting during init")
		os.Exit(2)
	}
	lambda.StartWithOptions(handle, lambda.WithEnableSIGTERM(func() {
		fmt.Println("echofn: SIGTERM received, draining")
		os.Exit(0)
	}))
}
