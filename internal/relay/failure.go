package relay

import (
	"fmt"
	"io"

	"github.com/molecule-ai/molecule-relay/internal/poller"
)

// Failure is one reason a one-shot run did not do all its work: a
// workspace that could not be polled, or messages dead-lettered or left
// pending by a stage.
type Failure struct {
	// Workspace is the workspace concerned ("" for a stage-wide failure).
	Workspace string `json:"workspace,omitempty"`
	// Stage is "poll", "dispatch" or "reply".
	Stage string `json:"stage"`
	// Cause is a short name: one of the poller.Cause* values, or
	// "dead_lettered", "pending", "error".
	Cause string `json:"cause"`
	// Error is the failure as reported ("" when the cause says it all).
	Error string `json:"error,omitempty"`
	// Action is what the operator should do about it.
	Action string `json:"action"`
}

// Stage-level causes.
const (
	CauseDeadLettered = "dead_lettered"
	CausePending      = "pending"
)

func (f Failure) String() string {
	who := f.Stage
	if f.Workspace != "" {
		who = "workspace " + f.Workspace
	}
	s := fmt.Sprintf("%s: %s", who, f.Cause)
	if f.Error != "" {
		s += ": " + f.Error
	}
	return s + "; " + f.Action
}

// pollFailures lists the workspaces a one-shot poll did not poll
// successfully, each with its cause and what to do.
func pollFailures(res *poller.Result) []Failure {
	var out []Failure
	for _, w := range res.Workspaces {
		cause, action, ok := poller.Diagnose(w)
		if ok {
			continue
		}
		f := Failure{Workspace: w.WorkspaceID, Stage: "poll", Cause: cause, Action: action}
		if w.Err != nil {
			f.Error = w.Err.Error()
		}
		out = append(out, f)
	}
	return out
}

func deadLettered(stage string, n uint64) Failure {
	return Failure{Stage: stage, Cause: CauseDeadLettered, Error: fmt.Sprintf("%d message(s) dead-lettered", n),
		Action: "inspect them with `molecule-relay dlq list` and `dlq show SEQ`, fix the cause, then `dlq replay SEQ` (the dead letters live in NATS: keep the store, see docs/ci.md)"}
}

func pending(queue string, n uint64) Failure {
	stage := "dispatch"
	if queue == "reply" {
		stage = "reply"
	}
	return Failure{Stage: stage, Cause: CausePending, Error: fmt.Sprintf("%d %s message(s) still queued (a failure waiting for its retry, or out of time)", n, queue),
		Action: "run again with the same NATS store or NATS_URL to finish them, or give the run more time (--idle); a fresh store would not have them"}
}

// PrintFailures writes one line per failure, for people.
func PrintFailures(w io.Writer, fs []Failure) {
	for _, f := range fs {
		fmt.Fprintln(w, "FAILED", f.String())
	}
}
