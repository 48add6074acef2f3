package poller

import (
	"context"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// windowChunks reads a window as window does (the last d, before until,
// back to from) and hands its rows to each a chunk at a time: one capped
// read (maxWindowPages), oldest first within the chunk, newer chunks
// first. Each chunk is handed over before the next is read, so memory
// stays bounded by one chunk while the whole window is read: a burst
// denser than the cap must not hide a late row behind it (the next quick
// re-read starts where this one started, rereadSpan, and would never
// reach it), nor a cold start's backlog its oldest rows. only is true when
// the window fitted in one chunk. An error of each ends the read.
func (p *Poller) windowChunks(ctx context.Context, w *workspace, d time.Duration, from, until time.Time, res *WorkspaceResult,
	each func(rows []molecule.ActivityRow, only bool) error) error {
	started := time.Now()
	for first := true; ; first = false {
		// since_secs is relative to now: it reaches as far back as at
		// the start.
		rows, reached, err := p.window(ctx, w, d+time.Since(started), from, until, res)
		if err != nil {
			return err
		}
		if err := each(rows, first && reached.IsZero()); err != nil {
			return err
		}
		if reached.IsZero() {
			return nil
		}
		until = reached.Add(time.Microsecond) // rows sharing its microsecond are read again, and recognised
		w.log.DebugContext(ctx, "poller: window read on past its page cap", "pages", maxWindowPages, "before", until)
	}
}
