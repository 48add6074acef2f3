package events

import "github.com/molecule-ai/molecule-relay/internal/jsonread"

// Hand decoders of the two envelopes every message is decoded from, once
// per stage (json.Unmarshal of them was about 4 % of the relay's CPU under
// the echo load: reflection, and every byte scanned twice). They read
// the envelopes json.Marshal writes, exact keys only, and decline
// anything else (an unknown, repeated or escaped key, a null, a value of
// another kind): decode then uses json.Unmarshal, so the result is
// always json.Unmarshal's (TestEnvelopeDecodersMatchEncodingJSON,
// FuzzEnvelopeDecodersMatchEncodingJSON).

// decodeInboundFast fills m from data, or reports false (m then holds
// partial values: the caller starts again from zero).
func decodeInboundFast(data []byte, m *Inbound) bool {
	var seen jsonread.Seen
	return jsonread.Object(data, func(key, val []byte) bool {
		switch string(key) {
		case "v":
			return seen.First(0) && jsonread.Int(val, &m.V)
		case "workspace_id":
			return seen.First(1) && jsonread.String(val, &m.WorkspaceID)
		case "activity_id":
			return seen.First(2) && jsonread.String(val, &m.ActivityID)
		case "source":
			return seen.First(3) && jsonread.String(val, (*string)(&m.Source))
		case "source_workspace_id":
			return seen.First(4) && jsonread.String(val, &m.SourceWorkspaceID)
		case "method":
			return seen.First(5) && jsonread.String(val, &m.Method)
		case "message_id":
			return seen.First(6) && jsonread.String(val, &m.MessageID)
		case "role":
			return seen.First(7) && jsonread.String(val, &m.Role)
		case "text":
			return seen.First(8) && jsonread.String(val, &m.Text)
		case "attachments":
			return seen.First(9) && jsonread.Value(val, &m.Attachments)
		case "cron":
			return seen.First(10) && jsonread.Bool(val, &m.Cron)
		case "kind":
			return seen.First(22) && jsonread.String(val, &m.Kind)
		case "in_reply_to":
			return seen.First(11) && jsonread.String(val, &m.InReplyTo)
		case "in_reply_to_message_id":
			return seen.First(12) && jsonread.String(val, &m.InReplyToMessageID)
		case "context_id":
			return seen.First(13) && jsonread.String(val, &m.ContextID)
		case "task_id":
			return seen.First(14) && jsonread.String(val, &m.TaskID)
		case "hops":
			return seen.First(15) && jsonread.Int(val, &m.Hops)
		case "peer_name":
			return seen.First(16) && jsonread.String(val, &m.PeerName)
		case "peer_role":
			return seen.First(17) && jsonread.String(val, &m.PeerRole)
		case "agent_card_url":
			return seen.First(18) && jsonread.String(val, &m.AgentCardURL)
		case "raw":
			return seen.First(19) && jsonread.Raw(val, &m.Raw)
		case "created_at":
			return seen.First(20) && jsonread.Time(val, &m.CreatedAt)
		case "polled_at":
			return seen.First(21) && jsonread.Time(val, &m.PolledAt)
		}
		return false
	})
}

// decodeReplyFast fills m from data, or reports false (as
// decodeInboundFast).
func decodeReplyFast(data []byte, m *Reply) bool {
	var seen jsonread.Seen
	return jsonread.Object(data, func(key, val []byte) bool {
		switch string(key) {
		case "v":
			return seen.First(0) && jsonread.Int(val, &m.V)
		case "workspace_id":
			return seen.First(1) && jsonread.String(val, &m.WorkspaceID)
		case "activity_id":
			return seen.First(2) && jsonread.String(val, &m.ActivityID)
		case "source":
			return seen.First(3) && jsonread.String(val, (*string)(&m.Source))
		case "target_workspace_id":
			return seen.First(4) && jsonread.String(val, &m.TargetWorkspaceID)
		case "text":
			return seen.First(5) && jsonread.String(val, &m.Text)
		case "attachments":
			return seen.First(6) && jsonread.Value(val, &m.Attachments)
		case "message_id":
			return seen.First(7) && jsonread.String(val, &m.MessageID)
		case "in_reply_to_message_id":
			return seen.First(8) && jsonread.String(val, &m.InReplyToMessageID)
		case "context_id":
			return seen.First(9) && jsonread.String(val, &m.ContextID)
		case "task_id":
			return seen.First(10) && jsonread.String(val, &m.TaskID)
		case "hops":
			return seen.First(11) && jsonread.Int(val, &m.Hops)
		case "conversation":
			return seen.First(12) && jsonread.String(val, &m.Conversation)
		case "inbound_text":
			return seen.First(13) && jsonread.String(val, &m.InboundText)
		case "inbound_attachments":
			return seen.First(14) && jsonread.Value(val, &m.InboundAttachments)
		case "inbound_created_at":
			return seen.First(15) && jsonread.Time(val, &m.InboundCreatedAt)
		case "polled_at":
			return seen.First(16) && jsonread.Time(val, &m.PolledAt)
		case "handled_at":
			return seen.First(17) && jsonread.Time(val, &m.HandledAt)
		}
		return false
	})
}
