package molecule

// CONTRACT STUB: the exported API below is fixed; ParseRow is being
// implemented.

import (
	"encoding/json"
	"errors"
	"time"
)

// ErrMalformedRow is matched by every error ParseRow returns.
var ErrMalformedRow = errors.New("molecule: malformed activity row")

// RowKind says what an a2a_receive row is.
type RowKind int

const (
	// KindMessage is an inbound message (canvas user, cron, peer, self).
	KindMessage RowKind = iota
	// KindOwnNotify is the agent's own /notify output (method "notify");
	// a poller must skip it, or it replies to itself forever.
	KindOwnNotify
	// KindUpload is a chat upload manifest (method "chat_upload_receive").
	KindUpload
)

// Sender classifies a row by source_id only (never by method).
type Sender int

const (
	// SenderCanvasUser: source_id null.
	SenderCanvasUser Sender = iota
	// SenderCron: source_id null and messageId prefix "cron-".
	SenderCron
	// SenderSelf: source_id equals the agent's own workspace id.
	SenderSelf
	// SenderPeer: any other source_id.
	SenderPeer
)

// Message is a parsed activity row.
type Message struct {
	ActivityID   string
	WorkspaceID  string
	ActivityType string
	Method       string
	Summary      string
	Status       string
	// SourceID is "" for a null source_id.
	SourceID string
	TargetID string
	Kind     RowKind
	Sender   Sender
	// Text is joined from the text parts (PROTOCOL.md §5 with fallbacks).
	Text        string
	Attachments []Attachment
	// MessageID and Role are params.message.messageId and .role.
	MessageID string
	Role      string
	// InReplyTo is params.message.metadata.in_reply_to.
	InReplyTo string
	// Hops is params.message.metadata.relay_hops (0 when absent).
	Hops      int
	CreatedAt time.Time
	// Enrichment (include=peer_info on NEW platforms).
	PeerName     string
	PeerRole     string
	AgentCardURL string
	// Raw is the row as received.
	Raw json.RawMessage
}

// ParseRow parses one activity row. self is the agent's own workspace id,
// used to classify self-messages. A malformed row yields an error matching
// ErrMalformedRow that names the row id when it can be read; ParseRow never
// panics.
func ParseRow(raw json.RawMessage, self string) (*Message, error) {
	return nil, ErrMalformedRow
}
