package events

import (
	"encoding/json"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// Marshal encodes an Inbound envelope, stamping the current Version: by
// hand (one per polled row), byte for byte what json.Marshal writes. An
// envelope with what the hand path declines (a time json.Marshal refuses,
// an activity row json.Marshal would escape or reject) is left to
// json.Marshal, error included (TestInboundEnvelopeEncodesLikeJSON,
// FuzzInboundEnvelopeEncodesLikeJSON).
func (m Inbound) Marshal() ([]byte, error) {
	m.V = Version
	o := jsonappend.Begin(make([]byte, 0, m.sizeHint()))
	o.Int("v", int64(m.V))
	o.Text("workspace_id", m.WorkspaceID)
	o.Text("activity_id", m.ActivityID)
	o.Text("source", string(m.Source))
	optionalText(&o, "source_workspace_id", m.SourceWorkspaceID)
	optionalText(&o, "method", m.Method)
	optionalText(&o, "message_id", m.MessageID)
	optionalText(&o, "role", m.Role)
	o.Text("text", m.Text)
	optionalAttachments(&o, "attachments", m.Attachments)
	if m.Cron {
		o.Bool("cron", true)
	}
	optionalText(&o, "kind", m.Kind)
	optionalText(&o, "in_reply_to", m.InReplyTo)
	optionalText(&o, "in_reply_to_message_id", m.InReplyToMessageID)
	optionalText(&o, "context_id", m.ContextID)
	optionalText(&o, "task_id", m.TaskID)
	if m.Hops != 0 {
		o.Int("hops", int64(m.Hops))
	}
	optionalText(&o, "peer_name", m.PeerName)
	optionalText(&o, "peer_role", m.PeerRole)
	optionalText(&o, "agent_card_url", m.AgentCardURL)
	if len(m.Raw) > 0 { // omitempty
		o.Compact("raw", m.Raw)
	}
	o.Time("created_at", m.CreatedAt)
	o.Time("polled_at", m.PolledAt)
	b, ok := o.End()
	if !ok {
		return json.Marshal(m)
	}
	return b, nil
}

// sizeHint is about the length of m's JSON: its strings and row plus the
// keys, the times and a few escapes.
func (m *Inbound) sizeHint() int {
	n := 480 + len(m.WorkspaceID) + len(m.ActivityID) + len(m.Source) + len(m.SourceWorkspaceID) + len(m.Method) +
		len(m.MessageID) + len(m.Role) + len(m.Kind) + len(m.Text) + len(m.InReplyTo) + len(m.InReplyToMessageID) + len(m.ContextID) +
		len(m.TaskID) + len(m.PeerName) + len(m.PeerRole) + len(m.AgentCardURL) + len(m.Raw)
	return n + attachmentsSizeHint(m.Attachments)
}
