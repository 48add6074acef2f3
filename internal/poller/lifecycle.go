// The workspace's lifecycle on the platform: generation, state, registration, removal and refused tokens.

package poller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Reasons a workspace stopped being polled (WorkspaceStatus.Stopped).
const (
	StoppedRemoved       = "removed"
	StoppedTokenRejected = "token_rejected"
	StoppedOldPlatform   = "old_platform"
)

// ErrTokenRejected: the platform refused the workspace token (401) while
// the workspace still exists: the token was revoked or is wrong. It also
// matches molecule.ErrUnauthorized.
var ErrTokenRejected = errors.New("poller: workspace token rejected")

// stillRemoved confirms that a workspace marked removed is still gone
// (true: stop), or clears the mark.
func (p *Poller) stillRemoved(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	removed, err := w.c.CheckRemoved(ctx)
	switch {
	case err != nil:
		res.Err = fmt.Errorf("poller: workspace was marked removed and the check failed: %w", err)
		return true
	case removed:
		res.Removed, res.Stopped, res.Err = true, true, removedError(w.id)
		return true
	default:
		set(func(r *statusRecord) { r.Removed, r.Stopped = false, "" })
		return false
	}
}

// registerIfNeeded registers the workspace when it has to be: a push
// workspace its URL once per process (the URL may have changed since the
// last run); a poll workspace once ever, or again when it was last
// registered in push mode. True ends the cycle.
func (p *Poller) registerIfNeeded(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	needRegister := !rec.Registered || rec.DeliveryMode == string(molecule.DeliveryPush)
	if w.pushURL != "" {
		needRegister = !w.isPushRegistered()
	}
	if needRegister && w.pushURL == "" && !rec.Registered && p.registeredByCheckpoint(ctx, w, set) {
		needRegister = false
	}
	return !p.cfg.SkipRegister && needRegister && p.register(ctx, w, res, set)
}

// generation returns the platform generation, probing it when unknown (or
// an OLD/inconclusive answer is older than ReprobeEvery). stop is true when
// the workspace must not be polled.
func (p *Poller) generation(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) (molecule.Generation, bool) {
	gen := rec.generation()
	if gen != molecule.GenerationNew && (rec.ProbedAt.IsZero() || time.Since(rec.ProbedAt) >= p.cfg.ReprobeEvery) {
		if err := p.pace(ctx, w); err != nil {
			res.Err = err
			return gen, true
		}
		g, err := w.c.Probe(ctx)
		if errors.Is(err, molecule.ErrUnauthorized) {
			p.unauthorized(ctx, w, err, res, set)
			return g, true
		}
		now := time.Now().UTC()
		gen = g
		set(func(r *statusRecord) { r.Generation, r.ProbedAt = g.String(), now })
		rec.Generation, rec.ProbedAt = g.String(), now
		switch g {
		case molecule.GenerationUnknown:
			w.log.WarnContext(ctx, "poller: platform generation probe inconclusive; polling anyway", "error", err)
		case molecule.GenerationNew:
			w.log.InfoContext(ctx, "poller: platform supports poll mode")
		}
	}
	if gen == molecule.GenerationOld && w.pushURL == "" { // push works on OLD
		w.log.ErrorContext(ctx, "poller: platform does not support poll mode (since_id ignored); refusing to poll this workspace. Use push ingress (register a public URL) or upgrade the platform")
		res.Stopped, res.Err = true, oldPlatformError(w.id)
		set(func(r *statusRecord) { r.Stopped = StoppedOldPlatform })
		return gen, true
	}
	set(func(r *statusRecord) {
		if r.Stopped == StoppedOldPlatform {
			r.Stopped = ""
		}
	})
	return gen, false
}

// checkState reads /state; it returns true when the cycle must end.
func (p *Poller) checkState(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	if err := p.pace(ctx, w); err != nil {
		res.Err = err
		return true
	}
	st, err := w.c.State(ctx)
	p.noteRateLimited(ctx, w, err, res)
	if errors.Is(err, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, err, res, set)
		return true
	}
	if err != nil {
		res.Err = fmt.Errorf("poller: read workspace state: %w", err)
		return true
	}
	if st.Deleted {
		p.removed(ctx, w, res, set)
		return true
	}
	if changed := w.setPaused(st.Paused); changed || st.Paused != rec.Paused {
		if st.Paused {
			w.log.InfoContext(ctx, "poller: workspace is paused; not fetching (heartbeats continue)")
		} else if rec.Paused {
			w.log.InfoContext(ctx, "poller: workspace resumed; fetching again")
		}
	}
	paused := st.Paused
	set(func(r *statusRecord) {
		r.Paused = paused
		if r.Stopped == StoppedTokenRejected {
			r.Stopped = ""
		}
	})
	return false
}

// register registers the workspace once; it returns true when the cycle
// must end.
func (p *Poller) register(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) bool {
	card := p.cfg.AgentCard
	if card == nil && p.cfg.AgentName != "" {
		card = map[string]any{"name": p.cfg.AgentName}
	}
	if w.isPaused() {
		w.log.WarnContext(ctx, "poller: registering a paused workspace at its first start; registration un-pauses it")
	}
	req := molecule.RegisterRequest{Mode: molecule.DeliveryPoll, AgentCard: card}
	if w.pushURL != "" {
		req.Mode, req.URL = molecule.DeliveryPush, w.pushURL
	}
	asked := time.Now()
	w.noteRegistering(asked)
	rr, err := w.c.Register(ctx, req)
	if errors.Is(err, molecule.ErrUnauthorized) {
		p.unauthorized(ctx, w, err, res, set)
		return true
	}
	if err != nil {
		res.Err = fmt.Errorf("poller: register: %w", err)
		if st := molecule.StatusOf(err); st >= 400 && st < 500 && st != 429 {
			res.Err = fmt.Errorf("%w: %w", ErrRegistrationRefused, err)
		}
		return true
	}
	switch {
	case req.Mode == molecule.DeliveryPush && (rr.DeliveryMode == molecule.DeliveryPush || rr.DeliveryMode == ""):
		// An OLD platform answers no delivery mode; it only has push.
		w.log.InfoContext(ctx, "poller: registered in push mode; messages arrive through the push ingress")
	case rr.DeliveryMode != req.Mode:
		w.log.ErrorContext(ctx, "poller: the platform did not confirm the delivery mode asked for at registration; messages may not arrive",
			"asked", string(req.Mode), "delivery_mode", string(rr.DeliveryMode), "status", rr.Status)
	default:
		w.log.InfoContext(ctx, "poller: registered in poll mode")
	}
	res.Registered = true
	w.setPushRegistered()
	w.setPaused(false) // a register un-pauses the workspace
	mode := string(rr.DeliveryMode)
	if mode == "" && req.Mode == molecule.DeliveryPush {
		mode = string(req.Mode) // OLD platforms do not say
	}
	// Remember it at once: a crash later in the cycle must not cause a
	// second registration, and a run that ends before its first seed must
	// not leave the next one (a new Poller) without the registration time
	// (seed).
	if _, err := p.updateStatus(ctx, w.id, func(r *statusRecord) {
		r.Registered, r.RegisteredAt, r.DeliveryMode, r.Paused = true, asked.UTC(), mode, false
	}); err != nil {
		res.Err = err
		return true
	}
	return false
}

// unauthorized handles a 401 on a previously usable token: confirm whether
// the workspace was deleted and stop polling it either way; never register
// again in a loop.
func (p *Poller) unauthorized(ctx context.Context, w *workspace, cause error, res *WorkspaceResult, set func(func(*statusRecord))) {
	removed, err := w.c.CheckRemoved(ctx)
	switch {
	case err != nil:
		res.Err = fmt.Errorf("poller: token rejected and the removal check failed: %w", errors.Join(cause, err))
		w.log.ErrorContext(ctx, "poller: token rejected; could not check whether the workspace was removed", "error", res.Err)
	case removed:
		p.removed(ctx, w, res, set)
	default:
		res.Stopped = true
		res.Err = fmt.Errorf("%w (%w): workspace %s exists but its token was refused (revoked or wrong); configure a valid token: %w",
			ErrTokenRejected, molecule.ErrUnauthorized, w.id, cause)
		w.log.ErrorContext(ctx, "poller: workspace token rejected (revoked or invalid) although the workspace exists; configure a new token. Polling of this workspace stops")
		set(func(r *statusRecord) { r.Stopped = StoppedTokenRejected })
	}
}

// removed stops a workspace deleted on the platform.
func (p *Poller) removed(ctx context.Context, w *workspace, res *WorkspaceResult, set func(func(*statusRecord))) {
	res.Removed, res.Stopped, res.Err = true, true, removedError(w.id)
	w.log.ErrorContext(ctx, "poller: workspace was deleted on the platform; regenerate the workspace and token. Polling of this workspace stops")
	set(func(r *statusRecord) { r.Removed, r.Stopped = true, StoppedRemoved })
}

func removedError(ws string) error {
	return fmt.Errorf("poller: workspace %s was deleted on the platform; regenerate the workspace and token: %w", ws, molecule.ErrWorkspaceRemoved)
}

func oldPlatformError(ws string) error {
	return fmt.Errorf("poller: workspace %s: platform does not support poll mode (since_id ignored); use push ingress or upgrade the platform: %w",
		ws, molecule.ErrOldPlatform)
}
