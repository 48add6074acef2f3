package mcpchannel

import (
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Method is the MCP notification Claude Code turns into a conversation
// turn, and Capability the experimental capability that makes it listen
// for it (docs/protocol.md, "Claude Code channel").
const (
	Method     = "notifications/claude/channel"
	Capability = "claude/channel"
)

// nameMax caps a peer-supplied name or role, as the TypeScript channel
// does, so the header stays one short line.
const nameMax = 64

// Notification is the params of one Method notification: content becomes
// the turn Claude reads, meta its attributes (string to string; Claude Code
// keeps only keys made of letters, digits and underscores).
type Notification struct {
	Content string            `json:"content"`
	Meta    map[string]string `json:"meta"`
}

// NewNotification builds the notification of an inbound message with the
// TypeScript channel's meta keys (peer_name, peer_role and agent_card_url
// when the envelope has them, enteros-mcp-claude-channel 4255a28
// server.ts:603-627) and content layout: a header line naming
// the sender, the text, and a line with the exact reply call. Peer-supplied
// names pass through Sanitize, so they cannot start a line of their own or
// close the header's brackets.
func NewNotification(in *events.Inbound) Notification { return NewNotificationWithFiles(in, nil) }

// NewNotificationWithFiles is NewNotification with the message's
// attachments as the relay holds them (attachments.go): their local paths
// in the meta keys the TypeScript channel uses and in the content.
func NewNotificationWithFiles(in *events.Inbound, files []handler.File) Notification {
	kind := string(events.SourceCanvasUser)
	peerID := ""
	if in.Source == events.SourcePeerAgent {
		kind = string(events.SourcePeerAgent)
		if events.ValidateWorkspaceID(in.SourceWorkspaceID) == nil {
			peerID = in.SourceWorkspaceID
		}
	}
	if in.Kind == events.KindBroadcast {
		kind = events.KindBroadcast
	}
	meta := map[string]string{
		"source":       "molecule",
		"kind":         kind,
		"workspace_id": in.WorkspaceID,
		"watching_as":  in.WorkspaceID,
		"peer_id":      peerID,
		"method":       Sanitize(in.Method),
		"activity_id":  in.ActivityID,
		"ts":           in.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	name, role := Sanitize(in.PeerName), Sanitize(in.PeerRole)
	if peerID != "" && name != "" {
		meta["peer_name"] = name
	}
	if peerID != "" && role != "" {
		meta["peer_role"] = role
	}
	if card := cardURL(in.AgentCardURL); peerID != "" && card != "" {
		meta["agent_card_url"] = card
	}
	var b strings.Builder
	b.WriteString(header(in.WorkspaceID, peerID, name, role))
	b.WriteByte('\n')
	b.WriteString(in.Text)
	addAttachments(&b, meta, in.Attachments, files)
	b.WriteByte('\n')
	if in.Kind == events.KindBroadcast {
		b.WriteString(broadcastHint(in.ActivityID))
	} else {
		b.WriteString(replyHint(in.WorkspaceID, peerID, in.ActivityID))
	}
	return Notification{Content: b.String(), Meta: meta}
}

// cardURL passes an agent card URL (include=peer_info: the platform's URL
// and the peer's id) only when it is a plain http(s) URL of at most 512
// URL characters, none of them a quote, bracket or space: Sanitize's cap
// would cut it, and meta must not carry what could close an attribute.
func cardURL(s string) string {
	if len(s) > 512 || strings.ContainsFunc(s, func(r rune) bool {
		return r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-._~:/?#@!$&()*+,;=%", r))
	}) {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return s
}

func header(ws, peerID, name, role string) string {
	if peerID == "" {
		return "[from canvas user · workspace=" + ws + "]"
	}
	who := "peer-agent"
	switch {
	case name != "" && role != "":
		who = name + " (" + role + ")"
	case name != "":
		who = name
	}
	return "[from " + who + " · peer_id=" + peerID + " · watching=" + ws + "]"
}

// broadcastHint replaces the reply line of a broadcast: the relay answers
// none (docs/protocol.md, "Broadcasts").
func broadcastHint(activity string) string {
	return `↩ A broadcast to every agent of the org: no reply is sent · done: dismiss({activity_id: "` + activity + `"})`
}

func replyHint(ws, peerID, activity string) string {
	peer := ""
	if peerID != "" {
		peer = `, peer_id: "` + peerID + `"`
	}
	return `↩ Reply: reply_to_workspace({workspace_id: "` + ws + `"` + peer +
		`, activity_id: "` + activity + `", text: "..."}) · no reply: dismiss({activity_id: "` + activity + `"})`
}

// Sanitize makes a peer-supplied field safe to show in a header: letters,
// digits, spaces and _ . - / + : @ ( ) are kept, anything else (newlines,
// control characters, brackets, quotes) becomes a space; runs of spaces
// collapse; the result is trimmed and capped at 64 characters, the last
// one an ellipsis when cut.
func Sanitize(s string) string {
	mapped := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(" _.-/+:@()", r) {
			return r
		}
		return ' '
	}, s)
	out := strings.Join(strings.Fields(mapped), " ")
	if r := []rune(out); len(r) > nameMax {
		out = string(r[:nameMax-1]) + "…"
	}
	return out
}
