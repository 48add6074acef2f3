package events

import (
	"encoding/json"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// Marshal encodes r as json.Marshal does, but embeds Reply as it is: the
// reply envelope the dispatcher just encoded, which json.Marshal would
// validate and compact a second time. Reply must be compact JSON (what
// Reply.Marshal returns). An outcome that needs escaping, a time
// json.Marshal would refuse, or a refusal (ReplyRefused) goes through
// json.Marshal.
func (r HandledRecord) Marshal() ([]byte, error) {
	if r.ReplyRefused != nil {
		// A refused direct post's update: rare, not worth a hand encoder.
		return json.Marshal(r)
	}
	o := jsonappend.Begin(make([]byte, 0, 96+len(r.Reply)))
	o.String("outcome", r.Outcome)
	if len(r.Reply) > 0 {
		o.Raw("reply", r.Reply)
	}
	o.Uint("delivery", r.Delivery)
	o.Time("handled_at", r.HandledAt)
	if !r.DirectPostingAt.IsZero() { // omitzero
		o.Time("direct_posting_at", r.DirectPostingAt)
	}
	if !r.DirectDeadline.IsZero() {
		o.Time("direct_deadline", r.DirectDeadline)
	}
	b, ok := o.End()
	if !ok {
		return json.Marshal(r)
	}
	return b, nil
}
