package replier

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/events"
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
// §6).
type refusalBody struct {
	Waking            bool  `json:"waking"`
	Busy              bool  `json:"busy"`
	Restarting        bool  `json:"restarting"`
	DeliveryConfirmed *bool `json:"delivery_confirmed"`
}

// classifyRefusal maps a failed post on route (events.RouteA2A or
// events.RouteNotify) to what to do, following the error tables of
// docs/protocol.md §6.
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
	msg := strings.ToLower(ae.Message)
	switch st := ae.StatusCode; {
	case st == http.StatusTooManyRequests:
		return refusal{notDelivered, "rate limited; retrying after the platform's Retry-After"}
	case st == http.StatusUnauthorized:
		return refusal{permanentFailure, "the platform refused this workspace's token (401): the workspace was probably deleted or its token revoked; fix MOLECULE_WORKSPACE_TOKEN, then replay this dead letter"}
	case st == http.StatusGone:
		return refusal{refusedForNow, removedReason(route)}
	case st == http.StatusNotFound && ae.Message == "":
		// A bare empty 404 is the tenant routing (docs/protocol.md §2): a
		// configuration error, not a passing state.
		return refusal{permanentFailure, "the request did not reach the tenant (bare 404); check MOLECULE_ORG_ID and MOLECULE_PLATFORM_URL, then replay this dead letter"}
	case st == http.StatusNotFound:
		return refusal{refusedForNow, notFoundReason(route, ae)}
	case st == http.StatusServiceUnavailable && strings.Contains(msg, "has no url"):
		return refusal{refusedForNow, fmt.Sprintf("the platform cannot deliver to the peer: %q (a push-mode peer that never registered a URL, or an OLD platform and a poll-mode peer); the peer must register, then replay this dead letter", ae.Message)}
	case st == http.StatusServiceUnavailable && (fl.Waking || fl.Busy || fl.Restarting || ae.Code != ""):
		return refusal{notDelivered, "the peer is waking, busy or restarting; retrying after the platform's Retry-After"}
	case st == http.StatusBadGateway && strings.Contains(msg, "not publicly routable"):
		return refusal{permanentFailure, "the peer's registered URL is not publicly routable, so the platform will not deliver to it; the peer must register a public URL, then replay this dead letter"}
	case st == http.StatusBadGateway && fl.DeliveryConfirmed != nil && *fl.DeliveryConfirmed:
		return refusal{verdict: delivered}
	case st == http.StatusPaymentRequired:
		return refusal{permanentFailure, "the workspace's budget limit is exceeded (402); raise the budget, then replay this dead letter"}
	case st == http.StatusForbidden && strings.Contains(msg, "talk_to_user_disabled"):
		return refusal{permanentFailure, "talking to the user is disabled for this workspace (403 talk_to_user_disabled); enable it, then replay this dead letter"}
	case st == http.StatusForbidden && strings.Contains(msg, "invalid caller id"):
		return refusal{permanentFailure, "the platform refused the caller id (403 invalid caller ID); check MOLECULE_WORKSPACE_ID"}
	case st == http.StatusForbidden:
		return refusal{permanentFailure, fmt.Sprintf("the platform forbids this reply (403 %q), e.g. the hierarchy rules do not let these workspaces talk; change the hierarchy, then replay this dead letter", ae.Message)}
	case st >= 400 && st < 500:
		return refusal{permanentFailure, fmt.Sprintf("the platform refused the reply (%d %q); retrying cannot fix it", st, ae.Message)}
	}
	// 500, other 502/503/504: the platform or the peer may have acted.
	return refusal{verdict: maybeDelivered}
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
