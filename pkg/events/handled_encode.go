package events

import (
	"encoding/json"
	"strconv"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// Marshal encodes r as json.Marshal does, but embeds Reply as it is: the
// reply envelope the dispatcher just encoded, which json.Marshal would
// validate and compact a second time. Reply must be compact JSON (what
// Reply.Marshal returns). An outcome other than the three known ones, or
// a time json.Marshal would refuse, goes through json.Marshal.
func (r HandledRecord) Marshal() ([]byte, error) {
	if !knownOutcome(r.Outcome) {
		return json.Marshal(r)
	}
	b := make([]byte, 0, 96+len(r.Reply))
	b = append(b, `{"outcome":"`...)
	b = append(b, r.Outcome...)
	b = append(b, '"')
	if len(r.Reply) > 0 {
		b = append(b, `,"reply":`...)
		b = append(b, r.Reply...)
	}
	b = append(b, `,"delivery":`...)
	b = strconv.AppendUint(b, r.Delivery, 10)
	b = append(b, `,"handled_at":`...)
	b, ok := jsonappend.Time(b, r.HandledAt)
	if !ok {
		return json.Marshal(r)
	}
	return append(b, '}'), nil
}

func knownOutcome(o string) bool {
	return o == OutcomeReplied || o == OutcomeNoReply || o == OutcomeSuppressed
}
