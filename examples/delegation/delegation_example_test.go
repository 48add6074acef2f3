package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The example as a user runs it (`go run ./examples/delegation`): two
// relays with their own embedded NATS on the platform double; the canvas
// question to the coordinator is answered with the researcher's answer.
func TestExampleCoordinatorAnswersWithTheResearchersAnswer(t *testing.T) {
	// No deadline on ctx: a stage under a deadline runs as a drain that
	// admits no handler whose timeout does not fit (internal/stage admission).
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(60*time.Second, cancel).Stop()
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"HOME=" + t.TempDir()}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `coordinator → canvas: The researcher says: "How many words are in this question?" has 7 words.`
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output:\n%s\nwant a line starting %q", out.String(), want)
	}
}
