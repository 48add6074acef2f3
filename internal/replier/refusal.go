package replier

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// RefusalRetries is how many deliveries a reply gets when the platform
// refused it for a reason that may be a passing state (a peer that has no
// URL yet, a peer not found), before it is dead-lettered with the
// platform's reason.
const RefusalRetries = 3

// verdict is what to do with a reply the platform did not accept.
type verdict int

const (
	// maybeDelivered: the platform may have processed the request
	// (transport error after sending, gateway error, our own timeout):
	// reconcile before any second post, retry.
	maybeDelivered verdict = iota
	// notDelivered: the answer proves the request was not processed
	// (429, busy, waking, restarting): retry after the platform's wait.
	notDelivered
	// refusedForNow: refused, not processed, for a reason that may pass
	// soon: retry RefusalRetries times, then dead-letter.
	refusedForNow
	// permanentFailure: refused for good; dead-letter with the reason.
	permanentFailure
	// delivered: the answer is an error but says the peer got the
	// message (502 with delivery_confirmed true).
	delivered
)

// refusal is a classified failed post.
type refusal struct {
	verdict verdict
	// reason is the platform's reason and what to do, for the dead
	// letter and the log ("" when the error says it all).
	reason string
}

// refusalBody holds the flags of the /a2a error answers (docs/protocol.md
// §6) and the hint some refusals carry.
type refusalBody struct {
	Waking            bool   `json:"waking"`
	Busy              bool   `json:"busy"`
	Restarting        bool   `json:"restarting"`
	DeliveryConfirmed *bool  `json:"delivery_confirmed"`
	Hint              string `json:"hint"`
}

// classifyRefusal maps a failed post on route (events.RouteA2A or
// events.RouteNotify) to what to do, following the error tables of
// docs/protocol.md §6 and "Generations". Each permanent refusal's reason
// names its cause (the sentinel pkg/molecule matched) and what to do.
func classifyRefusal(route string, err error) refusal {
	var ae *molecule.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, molecule.ErrInvalidArgument) {
			return refusal{permanentFailure, "the reply was refused before sending; it cannot be posted as it is"}
		}
		return refusal{verdict: maybeDelivered} // transport failure or our timeout
	}
	var fl refusalBody
	_ = json.Unmarshal([]byte(ae.Body), &fl)
	if reason := permanentReason(err, fl); reason != "" {
		return refusal{permanentFailure, reason}
	}
	switch st := ae.StatusCode; {
	case st == http.StatusTooManyRequests:
		return refusal{notDelivered, "rate limited; retrying after the platform's Retry-After"}
	case st == http.StatusGone:
		return refusal{refusedForNow, removedReason(route)}
	case errors.Is(err, molecule.ErrTenantRouting):
		// A bare empty 404 (docs/protocol.md §2): a configuration error,
		// not a passing state.
		return refusal{permanentFailure, "the request did not reach the tenant (bare 404); check MOLECULE_ORG_ID and MOLECULE_PLATFORM_URL, then replay this dead letter"}
	case st == http.StatusNotFound:
		return refusal{refusedForNow, notFoundReason(route, ae)}
	case errors.Is(err, molecule.ErrPeerHasNoURL):
		return refusal{refusedForNow, fmt.Sprintf("the platform cannot deliver to the peer: %q (a push-mode peer that never registered a URL, or an OLD platform and a poll-mode peer); the peer must register, then replay this dead letter", ae.Message)}
	case st == http.StatusServiceUnavailable && (fl.Waking || fl.Busy || fl.Restarting || ae.Code != "" || ae.RetryAfter > 0):
		return refusal{notDelivered, "the peer is waking, busy, restarting or warming up; retrying after the platform's Retry-After"}
	case st == http.StatusBadGateway && fl.DeliveryConfirmed != nil && *fl.DeliveryConfirmed:
		return refusal{verdict: delivered}
	case st == http.StatusForbidden:
		return refusal{permanentFailure, fmt.Sprintf("the platform forbids this reply (403 %q); retrying cannot fix it", ae.Message)}
	case st >= 400 && st < 500:
		return refusal{permanentFailure, fmt.Sprintf("the platform refused the reply (%d %q); retrying cannot fix it", st, ae.Message)}
	}
	// 500, other 502/503/504: the platform or the peer may have acted.
	return refusal{verdict: maybeDelivered}
}

// permanentReasons are the refusals that stay until someone changes a
// setting, with the cause in our words and what to do; the first whose
// sentinel err matches applies.
var permanentReasons = []struct {
	sentinel error
	reason   string
}{
	{molecule.ErrTalkToUserDisabled, "talking to the user is disabled for this workspace (canvas setting \"talk to user\", talk_to_user_enabled=false; 403 talk_to_user_disabled): turn it on in the workspace's settings, or forward the message to a parent workspace, then replay this dead letter"},
	{molecule.ErrDelegationDisabled, "the workspace may not send A2A messages (can_delegate=false; 403 \"tool call failed\"): the platform refuses every message/send it makes to another workspace, replies to peers included; allow delegation for this workspace, then replay this dead letter"},
	{molecule.ErrHierarchy, "the hierarchy rules do not let these workspaces talk (403): change the hierarchy, then replay this dead letter"},
	{molecule.ErrInvalidCallerID, "the platform refused the caller id (403 invalid caller ID); check MOLECULE_WORKSPACE_ID"},
	{molecule.ErrCallerMismatch, "the token is not this workspace's (401 caller ID does not match workspace auth token): MOLECULE_WORKSPACE_TOKEN belongs to another workspace than MOLECULE_WORKSPACE_ID; fix them, then replay this dead letter"},
	{molecule.ErrUnauthorized, "the platform refused this workspace's token (401): the workspace was probably deleted or its token revoked; fix MOLECULE_WORKSPACE_TOKEN, then replay this dead letter"},
	{molecule.ErrBodyTooLarge, "the reply is larger than the platform takes (413; 16 MiB on /a2a): shorten it or send it as a file, then replay this dead letter"},
	{molecule.ErrBudgetExceeded, "the workspace's budget limit is exceeded (402); raise the budget, then replay this dead letter"},
	{molecule.ErrPeerNotRoutable, "the peer's registered URL is not publicly routable, so the platform will not deliver to it; the peer must register a public URL, then replay this dead letter"},
}

// permanentReason is the reason of a permanent refusal err, with the
// platform's hint when it gave one; "" when err is not one.
func permanentReason(err error, fl refusalBody) string {
	for _, p := range permanentReasons {
		if errors.Is(err, p.sentinel) {
			if fl.Hint != "" {
				return p.reason + " (the platform's hint: " + fl.Hint + ")"
			}
			return p.reason
		}
	}
	return ""
}

func removedReason(route string) string {
	if route == events.RouteNotify {
		return "this workspace was removed on the platform; create a new workspace and token"
	}
	return "the peer workspace was removed on the platform; nobody will read this reply"
}

func notFoundReason(route string, ae *molecule.APIError) string {
	if route == events.RouteNotify {
		return fmt.Sprintf("the platform does not know this workspace (404 %q): it was removed; create a new workspace and token", ae.Message)
	}
	return fmt.Sprintf("the peer workspace does not exist (404 %q): it was removed or never existed", ae.Message)
}
