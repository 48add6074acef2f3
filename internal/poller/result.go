// What a cycle reports (WorkspaceResult, Result).

package poller

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// WorkspaceResult is what one poll cycle of one workspace did.
type WorkspaceResult struct {
	WorkspaceID string `json:"workspace_id"`
	// Generation is the platform generation known after the cycle.
	Generation molecule.Generation `json:"-"`
	// Registered is true when this cycle registered the workspace.
	Registered bool `json:"registered"`
	// Heartbeat is true when this cycle sent a heartbeat the platform
	// accepted.
	Heartbeat bool `json:"heartbeat"`
	// Fetched counts rows read from the feed, overlap re-reads included.
	Fetched int `json:"fetched"`
	// Published counts new messages JetStream stored; Duplicates those it
	// dropped as already published (PubAck.Duplicate).
	Published  int `json:"published"`
	Duplicates int `json:"duplicates"`
	// Skipped counts rows passed without publishing, by Skip* reason.
	Skipped map[string]int `json:"skipped,omitempty"`
	// Malformed counts rows that could not be parsed; each went to the
	// dead-letter stream and the cursor passed it.
	Malformed int `json:"malformed"`
	// Overlap is true when the overlap re-read ran.
	Overlap bool `json:"overlap"`
	// RateLimited counts 429 answers met (and waited out).
	RateLimited int `json:"rate_limited"`
	// Cursor is the activity id the cursor points at after the cycle.
	Cursor string `json:"cursor"`
	// More: the fetch stopped after a full batch (Config.BatchRows); rows
	// are left after the cursor.
	More bool `json:"more"`
	// AckedSeq is the seq this cycle acked to the platform (ack.go), 0 for
	// none.
	AckedSeq int64 `json:"acked_seq,omitempty"`
	// Paused: the workspace is paused; nothing was fetched.
	Paused bool `json:"paused"`
	// Removed: the workspace was deleted on the platform.
	Removed bool `json:"removed"`
	// Stopped: polling this workspace cannot go on (removed, token
	// rejected, OLD platform) until an operator acts; Run stops its loop.
	Stopped bool `json:"stopped"`
	// Err is the cycle's failure, nil on success.
	Err error `json:"-"`

	// rereadOwed: a wake-up's poll found nothing after the cursor; Run
	// schedules a quick re-read (followUps.owe).
	rereadOwed bool
}

// MarshalJSON renders the result with snake_case keys, like every JSON the
// relay prints, Generation as "new"/"old"/"unknown" and Err as its message
// "error" (for `poll --once --json` and Lambda answers). Earlier builds
// used the Go field names (WorkspaceID, Fetched, Err); see docs/ci.md,
// "JSON", for readers of both.
func (r WorkspaceResult) MarshalJSON() ([]byte, error) {
	type plain WorkspaceResult
	out := struct {
		plain
		Generation string `json:"generation"`
		Err        string `json:"error,omitempty"`
	}{plain: plain(r), Generation: r.Generation.String()}
	if r.Err != nil {
		out.Err = r.Err.Error()
	}
	return json.Marshal(out)
}

// Result is what RunOnce did, one entry per configured workspace, in
// configuration order.
type Result struct {
	Workspaces []WorkspaceResult `json:"workspaces"`
}

// Err joins the failures of every workspace (nil if none failed), each
// prefixed with its workspace id; a CLI's --once exits non-zero on it.
func (r Result) Err() error {
	var errs []error
	for _, w := range r.Workspaces {
		if w.Err != nil {
			errs = append(errs, fmt.Errorf("workspace %s: %w", w.WorkspaceID, w.Err))
		}
	}
	return errors.Join(errs...)
}

// Published is the total of WorkspaceResult.Published.
func (r Result) Published() int {
	n := 0
	for _, w := range r.Workspaces {
		n += w.Published
	}
	return n
}
