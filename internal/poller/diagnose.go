// Explaining a failed cycle to an operator (cause and action).

package poller

import (
	"context"
	"errors"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ErrRegistrationRefused: the platform answered POST /registry/register
// with an error. Messages are not queued for the workspace in the mode
// asked for until a registration succeeds.
var ErrRegistrationRefused = errors.New("poller: registration refused")

// Causes of a failed workspace, as Diagnose names them.
const (
	CausePaused       = "paused"
	CauseRemoved      = "removed"
	CauseUnauthorized = "unauthorized"
	CauseNoPollMode   = "no_poll_mode"
	CauseRegistration = "registration_refused"
	CauseUnreachable  = "unreachable"
	CauseRateLimited  = "rate_limited"
	CauseTenant       = "tenant_routing"
	CauseOutOfTime    = "out_of_time"
	CauseError        = "error"
)

// Diagnose names why a poll of one workspace did not do its work, and
// what the operator should do about it. ok is true when the cycle did its
// work (nothing to report). A paused workspace is not an error of the
// relay, but a one-shot run that fetched nothing because of it did not do
// its job, so it is reported.
func Diagnose(r WorkspaceResult) (cause, action string, ok bool) {
	if r.Err == nil {
		if r.Paused {
			return CausePaused, "the workspace is paused on the platform; nothing was fetched. Resume it (messages stay queued on the platform meanwhile)", false
		}
		return "", "", true
	}
	cause, action = DiagnoseErr(r.Err)
	return cause, action, false
}

// DiagnoseErr names the cause of a poll failure and what to do about it.
func DiagnoseErr(err error) (cause, action string) {
	switch {
	case errors.Is(err, molecule.ErrWorkspaceRemoved):
		return CauseRemoved, "the workspace was deleted on the platform; create a new workspace and set MOLECULE_WORKSPACE_ID and MOLECULE_WORKSPACE_TOKEN to it"
	case errors.Is(err, molecule.ErrUnauthorized), errors.Is(err, ErrTokenRejected):
		return CauseUnauthorized, "the platform refused the workspace token (wrong or revoked); set MOLECULE_WORKSPACE_TOKEN to a valid token of this workspace"
	case errors.Is(err, molecule.ErrOldPlatform):
		return CauseNoPollMode, "the platform has no poll mode (a build before 2026-05); upgrade the platform, or run long-running with push ingress (MOLECULE_PUSH_LISTEN, MOLECULE_PUSH_URL)"
	case errors.Is(err, ErrRegistrationRefused):
		return CauseRegistration, "the platform refused POST /registry/register (see the error); check the platform version, MOLECULE_PUSH_URL and the agent card"
	case errors.Is(err, molecule.ErrTenantRouting):
		return CauseTenant, "the request did not reach the tenant; check MOLECULE_ORG_ID (or this workspace's entry of MOLECULE_ORG_IDS) and MOLECULE_PLATFORM_URL (or MOLECULE_PLATFORM_URLS)"
	case errors.Is(err, molecule.ErrRateLimited), errors.Is(err, ErrRateWaitPastDeadline):
		return CauseRateLimited, "the token's rate budget (600 requests a minute, shared by every user of the token) ran out; run less often or stop other users of the token"
	case errors.Is(err, molecule.ErrPlatformUnavailable):
		return CauseUnreachable, "the platform did not answer or answered 5xx; check MOLECULE_PLATFORM_URL (or this workspace's entry of MOLECULE_PLATFORM_URLS) and the network, then run again"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return CauseOutOfTime, "the run ended before this workspace was polled; give the job more time"
	}
	return CauseError, "see the error; the next run retries"
}
