package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Errors of the session's methods; the HTTP API answers each with the
// status statusOf gives and a JSON {"error": message} that says what to
// do.
var (
	// ErrSessionEnded: the handler returned or its deadline passed (401).
	ErrSessionEnded = errors.New("agentapi: the message's session has ended (its handler returned or its deadline passed)")
	// ErrSecretsOff: secrets were asked for without MOLECULE_AGENT_API_SECRETS=true (403).
	ErrSecretsOff = errors.New("agentapi: reading secrets is turned off; the operator enables it with MOLECULE_AGENT_API_SECRETS=true")
	// ErrNoAsker: this relay has no way to ask a peer and wait (501).
	ErrNoAsker = errors.New("agentapi: asking a peer and waiting is not available in this relay; send the peer an A2A message yourself or upgrade the relay")
	// ErrNoClient: the relay holds no platform client for the message's
	// workspace, as on a Lambda dispatcher without the token secret (503).
	ErrNoClient = errors.New("agentapi: this dispatcher has no platform token for workspace")
	// ErrNoRecords: no bucket to record canvas interims in (503).
	ErrNoRecords = errors.New("agentapi: interim messages to a canvas user need the dispatcher's handled bucket, which this relay did not configure")
	// ErrLoopGuard: a peer interim refused because the message is itself
	// a reply or reached the hop limit (409).
	ErrLoopGuard = errors.New("agentapi: no interim to this peer: the relay does not answer this message (loop guard), so two agents cannot message each other forever")
	// ErrBadRequest: the request is malformed (400).
	ErrBadRequest = errors.New("agentapi: bad request")
	// ErrRateBudget: the workspace's platform rate budget is spent until
	// after the handler's deadline (429).
	ErrRateBudget = errors.New("agentapi: the workspace's platform rate budget is at its reserve")
)

// budgetError is ErrRateBudget with the wait until the window resets.
type budgetError struct{ wait time.Duration }

func (e *budgetError) Error() string {
	return fmt.Sprintf("%v until %s from now, after this handler's deadline; send fewer interim messages", ErrRateBudget, e.wait.Round(time.Second))
}

func (e *budgetError) Is(target error) bool { return target == ErrRateBudget }

// statusOf maps an error to the HTTP status the API answers.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrSessionEnded):
		return http.StatusUnauthorized
	case errors.Is(err, molecule.ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case molecule.RefusalOf(err) != nil:
		// Refused for good (talk to user off, can_delegate=false, …):
		// the handler is not to retry.
		return http.StatusForbidden
	case errors.Is(err, ErrSecretsOff), errors.Is(err, ErrNotAttachment):
		return http.StatusForbidden
	case errors.Is(err, ErrFileGone), errors.Is(err, molecule.ErrNotFound):
		// The platform has no such workspace (or upload): the handler
		// asked for something that is not there, not a platform fault.
		return http.StatusNotFound
	case errors.Is(err, ErrFileScheme):
		return http.StatusNotImplemented
	case errors.Is(err, molecule.ErrResponseTooLarge):
		return http.StatusBadGateway
	case errors.Is(err, ErrNoAsker):
		return http.StatusNotImplemented
	case errors.Is(err, ErrNoClient), errors.Is(err, ErrNoRecords):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrBadRequest), errors.Is(err, molecule.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, ErrLoopGuard):
		return http.StatusConflict
	case errors.Is(err, ErrRateBudget):
		return http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case molecule.StatusOf(err) != 0:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// writeError answers err as JSON; a platform error says the platform
// refused, so the handler knows the API itself worked.
func writeError(w http.ResponseWriter, err error) {
	status := statusOf(err)
	msg := err.Error()
	if code := molecule.StatusOf(err); code != 0 {
		msg = fmt.Sprintf("the platform answered %d: %v", code, err)
		if r := molecule.RefusalOf(err); r != nil {
			msg = fmt.Sprintf("the platform refused it for good (%v); sending it again gets the same answer: %v", r, err)
		}
	}
	var be *budgetError
	if errors.As(err, &be) {
		w.Header().Set("Retry-After", strconv.Itoa(int(be.wait.Round(time.Second)/time.Second)))
	}
	writeJSON(w, status, map[string]string{"error": msg})
}
