package events

import (
	"encoding/json"

	"github.com/molecule-ai/molecule-relay/internal/jsonappend"
)

// Marshal encodes a Reply envelope, stamping the current Version: by hand
// (one per handled message), byte for byte what json.Marshal writes; a
// time json.Marshal refuses leaves the envelope to json.Marshal, error
// included (TestReplyEnvelopeEncodesLikeJSON, FuzzReplyEnvelopeEncodesLikeJSON).
func (m Reply) Marshal() ([]byte, error) {
	m.V = Version
	o := jsonappend.Begin(make([]byte, 0, m.sizeHint()))
	o.Int("v", int64(m.V))
	o.Text("workspace_id", m.WorkspaceID)
	o.Text("activity_id", m.ActivityID)
	o.Text("source", string(m.Source))
	optionalText(&o, "target_workspace_id", m.TargetWorkspaceID)
	o.Text("text", m.Text)
	optionalAttachments(&o, "attachments", m.Attachments)
	optionalText(&o, "message_id", m.MessageID)
	optionalText(&o, "in_reply_to_message_id", m.InReplyToMessageID)
	optionalText(&o, "context_id", m.ContextID)
	optionalText(&o, "task_id", m.TaskID)
	if m.Hops != 0 {
		o.Int("hops", int64(m.Hops))
	}
	optionalText(&o, "conversation", m.Conversation)
	optionalText(&o, "inbound_text", m.InboundText)
	optionalAttachments(&o, "inbound_attachments", m.InboundAttachments)
	o.Time("inbound_created_at", m.InboundCreatedAt)
	if !m.PolledAt.IsZero() { // omitzero
		o.Time("polled_at", m.PolledAt)
	}
	o.Time("handled_at", m.HandledAt)
	b, ok := o.End()
	if !ok {
		return json.Marshal(m)
	}
	return b, nil
}

// sizeHint is about the length of m's JSON: its strings plus the keys,
// the times and a few escapes.
func (m *Reply) sizeHint() int {
	n := 400 + len(m.WorkspaceID) + len(m.ActivityID) + len(m.Source) + len(m.TargetWorkspaceID) + len(m.Text) +
		len(m.MessageID) + len(m.InReplyToMessageID) + len(m.ContextID) + len(m.TaskID) + len(m.Conversation) + len(m.InboundText)
	return n + attachmentsSizeHint(m.Attachments) + attachmentsSizeHint(m.InboundAttachments)
}

func attachmentsSizeHint(as []Attachment) int {
	n := 0
	for i := range as {
		n += 48 + len(as[i].URI) + len(as[i].Name) + len(as[i].MimeType)
	}
	return n
}

// optionalText writes a string field tagged omitempty.
func optionalText(o *jsonappend.Object, key, s string) {
	if s != "" {
		o.Text(key, s)
	}
}

// optionalAttachments writes an attachments field tagged omitempty.
func optionalAttachments(o *jsonappend.Object, key string, as []Attachment) {
	if len(as) > 0 {
		o.Key(key)
		o.Value(func(b []byte) ([]byte, bool) { return AppendAttachments(b, as), true })
	}
}

// AppendAttachments appends as as json.Marshal writes []Attachment (nil
// as an empty list: the caller omits an empty field).
func AppendAttachments(b []byte, as []Attachment) []byte {
	b = append(b, '[')
	for i := range as {
		if i > 0 {
			b = append(b, ',')
		}
		a := &as[i]
		o := jsonappend.Begin(b)
		o.Text("uri", a.URI)
		o.Text("name", a.Name)
		if a.MimeType != "" { // omitempty
			o.Text("mimeType", a.MimeType)
		}
		if a.Size != 0 { // omitempty
			o.Int("size", a.Size)
		}
		b, _ = o.End()
	}
	return append(b, ']')
}
