package molecule

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// SelfReportTypes are the activity types POST /workspaces/:id/activity
// accepts (docs/protocol.md §10); anything else is 400.
var SelfReportTypes = []string{"a2a_send", "a2a_receive", "task_update", "agent_log", "skill_promotion", "memory_write", "error"}

// ActivityReport is a self-report: a row the workspace writes on its own
// feed. The platform forces source_id to the workspace itself (a foreign
// source_id is 403), so the report has none.
type ActivityReport struct {
	// ActivityType is one of SelfReportTypes. Required.
	ActivityType string `json:"activity_type"`
	Method       string `json:"method,omitempty"`
	Summary      string `json:"summary,omitempty"`
	// RequestBody is stored as the row's request_body (a JSON object).
	RequestBody json.RawMessage `json:"request_body,omitempty"`
	Status      string          `json:"status,omitempty"`
}

// ReportActivity writes a self-report row (POST /workspaces/:self/activity,
// answered 200 {"status":"logged"}). It is never retried: a POST may have
// been acted on. The platform may write the row after answering, so a
// caller that depends on the row reads it back.
func (c *Client) ReportActivity(ctx context.Context, rep ActivityReport) error {
	ok := false
	for _, t := range SelfReportTypes {
		ok = ok || t == rep.ActivityType
	}
	if !ok {
		return fmt.Errorf("%w: activity report: activity_type %q is not one of %v", ErrInvalidArgument, rep.ActivityType, SelfReportTypes)
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: c.selfPath("/activity"), body: rep})
	return err
}
