package events

import (
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// NewInbound builds the Inbound envelope of a parsed activity row of
// workspace ws: Source canvas_user for a canvas user or cron (Cron set),
// peer_agent with SourceWorkspaceID for a peer, self for a self-message;
// the row is kept in Raw. polledAt is when the row was read. The poller
// builds it from the feed, the push ingress from a pushed message.
func NewInbound(ws string, m *molecule.Message, polledAt time.Time) Inbound {
	env := Inbound{
		WorkspaceID: ws, ActivityID: m.ActivityID, Method: m.Method, MessageID: m.MessageID, Role: m.Role,
		Text: m.Text, InReplyTo: m.InReplyTo, InReplyToMessageID: m.InReplyToMessageID, Hops: m.Hops,
		ContextID: m.ContextID, TaskID: m.TaskID,
		PeerName: m.PeerName, PeerRole: m.PeerRole, AgentCardURL: m.AgentCardURL,
		Raw: m.Raw, CreatedAt: m.CreatedAt, PolledAt: polledAt,
	}
	if m.Kind == molecule.KindBroadcast {
		env.Kind = KindBroadcast
	}
	switch m.Sender {
	case molecule.SenderCron:
		env.Source, env.Cron = SourceCanvasUser, true
	case molecule.SenderPeer:
		env.Source, env.SourceWorkspaceID = SourcePeerAgent, m.SourceID
	case molecule.SenderSelf:
		env.Source, env.SourceWorkspaceID = SourceSelf, m.SourceID
	default:
		env.Source = SourceCanvasUser
	}
	for _, a := range m.Attachments {
		env.Attachments = append(env.Attachments, Attachment{URI: a.URI, Name: a.Name, MimeType: a.MimeType, Size: a.Size})
	}
	return env
}
