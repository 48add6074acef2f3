package dlq

import (
	"encoding/json"
	"sort"
)

// envelopeMetadata are the keys of a dead letter's envelope that say where
// a message came from and where it was going, but not what it said: the
// keys of events.Inbound and events.Reply other than text, attachments,
// the activity row and the answered turn, and the addressing keys of an
// activity row (the poller dead-letters a malformed row as it is). Any
// other key, a future one included, is withheld by Redacted: a key added
// to an envelope is a body until it is listed here.
var envelopeMetadata = map[string]bool{
	"v": true, "workspace_id": true, "activity_id": true, "source": true,
	"source_workspace_id": true, "target_workspace_id": true, "method": true,
	"message_id": true, "role": true, "cron": true, "in_reply_to": true,
	"in_reply_to_message_id": true, "context_id": true, "task_id": true,
	"hops": true, "peer_name": true, "peer_role": true, "agent_card_url": true,
	"conversation": true, "created_at": true, "polled_at": true,
	"inbound_created_at": true, "handled_at": true,
	// An activity row's addressing (pkg/molecule/testdata/rows).
	"id": true, "activity_type": true, "source_id": true, "status": true,
	"duration_ms": true,
}

// Redacted returns e without the message it carries, for printing: Raw
// (the stored bytes, body included) is dropped and the dead letter's
// envelope keeps only its metadata keys. Withheld names what was left
// out ("raw", "envelope.text", or "envelope" for an envelope that is not
// a JSON object), so a reader knows something was withheld and what. e
// itself is not changed.
func (e Entry) Redacted() Entry {
	out := e
	out.Raw, out.Withheld = nil, nil
	if len(e.Raw) > 0 {
		out.Withheld = append(out.Withheld, "raw")
	}
	if e.DeadLetter == nil || len(e.DeadLetter.Envelope) == 0 {
		return out
	}
	dl := *e.DeadLetter
	env, withheld := redactEnvelope(dl.Envelope)
	dl.Envelope = env
	out.DeadLetter = &dl
	out.Withheld = append(out.Withheld, withheld...)
	return out
}

// redactEnvelope keeps the metadata keys of envelope and names the keys it
// dropped. An envelope that is not a JSON object (a malformed one, stored
// as a JSON string) is withheld whole.
func redactEnvelope(envelope json.RawMessage) (json.RawMessage, []string) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(envelope, &fields) != nil || fields == nil {
		return nil, []string{"envelope"}
	}
	var withheld []string
	for k := range fields {
		if !envelopeMetadata[k] {
			withheld = append(withheld, "envelope."+k)
			delete(fields, k)
		}
	}
	sort.Strings(withheld)
	kept, err := json.Marshal(fields)
	if err != nil {
		return nil, []string{"envelope"}
	}
	return kept, withheld
}
