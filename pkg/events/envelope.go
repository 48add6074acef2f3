package events

import (
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Version is the envelope version this package writes. Decoders accept
// every version up to and including it and refuse newer ones, so an old
// stage never silently misreads a newer stage's envelope.
const Version = 1

// ErrUnsupportedVersion is returned when an envelope's "v" is newer than
// Version (or missing).
var ErrUnsupportedVersion = errors.New("events: unsupported envelope version")

// KindBroadcast is Inbound.Kind of a broadcast_receive row: the relay
// does not answer it (docs/protocol.md, "Broadcasts").
const KindBroadcast = "broadcast"

// Source is the normalised sender of an inbound message.
type Source string

const (
	// SourceCanvasUser is a message with a null source_id: a canvas user, or
	// the platform's cron (whose message id starts with "cron-").
	SourceCanvasUser Source = "canvas_user"
	// SourcePeerAgent is a message from another workspace (source_id set and
	// not the agent itself).
	SourcePeerAgent Source = "peer_agent"
	// SourceSelf is a message the agent sent itself; delivered only when
	// self-messages are enabled.
	SourceSelf Source = "self"
)

// Attachment is a file part of a message (A2A "file" part).
type Attachment struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mimeType,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// Inbound is one inbound message from a workspace's activity feed, published
// by the poller on InboundSubject(WorkspaceID).
type Inbound struct {
	V                 int          `json:"v"`
	WorkspaceID       string       `json:"workspace_id"`
	ActivityID        string       `json:"activity_id"`
	Source            Source       `json:"source"`
	SourceWorkspaceID string       `json:"source_workspace_id,omitempty"`
	Method            string       `json:"method,omitempty"`
	MessageID         string       `json:"message_id,omitempty"`
	Role              string       `json:"role,omitempty"`
	Text              string       `json:"text"`
	Attachments       []Attachment `json:"attachments,omitempty"`
	// Cron is true for a canvas-source message the platform's scheduler sent
	// (message id prefix "cron-").
	Cron bool `json:"cron,omitempty"`
	// Kind is KindBroadcast for a broadcast (a message another workspace
	// sent to every agent of the org); "" for a message addressed to this
	// workspace.
	Kind string `json:"kind,omitempty"`
	// InReplyTo is params.message.metadata.in_reply_to of the inbound
	// message: set when the message is itself a reply to one of ours.
	InReplyTo string `json:"in_reply_to,omitempty"`
	// InReplyToMessageID is metadata.in_reply_to_message_id: the messageId
	// of the message this one answers (set by relays on their replies).
	InReplyToMessageID string `json:"in_reply_to_message_id,omitempty"`
	// ContextID and TaskID are the A2A contextId and taskId of the message.
	ContextID string `json:"context_id,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	// Hops counts relay replies in this conversation (metadata.relay_hops of
	// the inbound message); used to cap agent-to-agent loops.
	Hops int `json:"hops,omitempty"`
	// Peer enrichment, present only when the platform supplied it
	// (include=peer_info on NEW platforms).
	PeerName     string `json:"peer_name,omitempty"`
	PeerRole     string `json:"peer_role,omitempty"`
	AgentCardURL string `json:"agent_card_url,omitempty"`
	// Raw is the activity row exactly as the platform returned it.
	Raw json.RawMessage `json:"raw,omitempty"`
	// CreatedAt is the row's created_at (when the platform queued it).
	CreatedAt time.Time `json:"created_at"`
	// PolledAt is when the poller read the row.
	PolledAt time.Time `json:"polled_at"`
}

// Reply is a handler's answer to an Inbound message, published by the
// dispatcher on ReplySubject(WorkspaceID) and posted by the replier.
type Reply struct {
	V           int    `json:"v"`
	WorkspaceID string `json:"workspace_id"`
	// ActivityID is the inbound activity this replies to; it is also
	// params.message.metadata.in_reply_to of a peer reply.
	ActivityID string `json:"activity_id"`
	// Source routes the reply: canvas_user → /notify, peer_agent → /a2a of
	// TargetWorkspaceID.
	Source            Source       `json:"source"`
	TargetWorkspaceID string       `json:"target_workspace_id,omitempty"`
	Text              string       `json:"text"`
	Attachments       []Attachment `json:"attachments,omitempty"`
	// MessageID is the stable A2A messageId of a peer reply (ReplyMessageID).
	MessageID string `json:"message_id,omitempty"`
	// InReplyToMessageID is the inbound message's own messageId, sent as
	// metadata.in_reply_to_message_id so an asking relay can match the
	// answer to its question; ContextID and TaskID are echoed from the
	// inbound message (A2A keeps a conversation's ids on every turn).
	InReplyToMessageID string `json:"in_reply_to_message_id,omitempty"`
	ContextID          string `json:"context_id,omitempty"`
	TaskID             string `json:"task_id,omitempty"`
	// Hops is the inbound message's Hops plus one.
	Hops int `json:"hops,omitempty"`
	// Conversation, InboundText and InboundAttachments are set when
	// conversation memory is on: once the reply is sent the replier
	// records the message answered (the user's turn) and the reply (the
	// agent's) in that conversation (internal/memory).
	Conversation       string       `json:"conversation,omitempty"`
	InboundText        string       `json:"inbound_text,omitempty"`
	InboundAttachments []Attachment `json:"inbound_attachments,omitempty"`
	// Timestamps for latency accounting.
	InboundCreatedAt time.Time `json:"inbound_created_at"`
	PolledAt         time.Time `json:"polled_at,omitzero"`
	HandledAt        time.Time `json:"handled_at"`
}

// DeadLetter records a message a stage gave up on. Envelope is the original
// envelope, byte for byte, so it can be replayed on OriginalSubject.
type DeadLetter struct {
	V               int             `json:"v"`
	Stage           string          `json:"stage"`
	WorkspaceID     string          `json:"workspace_id"`
	ActivityID      string          `json:"activity_id,omitempty"`
	Reason          string          `json:"reason"`
	Error           string          `json:"error,omitempty"`
	Deliveries      uint64          `json:"deliveries"`
	OriginalSubject string          `json:"original_subject"`
	OriginalStream  string          `json:"original_stream,omitempty"`
	OriginalSeq     uint64          `json:"original_seq,omitempty"`
	Envelope        json.RawMessage `json:"envelope"`
	FailedAt        time.Time       `json:"failed_at"`
}

// Dead-letter reasons.
const (
	// ReasonMaxDeliveries: the stage failed on every allowed delivery.
	ReasonMaxDeliveries = "max_deliveries"
	// ReasonPermanent: the stage hit an error retrying cannot fix.
	ReasonPermanent = "permanent_error"
	// ReasonMalformed: the envelope could not be decoded.
	ReasonMalformed = "malformed_envelope"
	// ReasonAmbiguous: a reply may already have been delivered and the
	// platform cannot de-duplicate a second post; an operator decides.
	ReasonAmbiguous = "ambiguous_delivery"
	// ReasonLoop: the message was refused by the agent-to-agent loop guard.
	ReasonLoop = "loop_guard"
	// ReasonUnawaitedAnswer: a peer's answer to a question no handler
	// waits for any more (the asking message finished, the wait was
	// abandoned, or the question already has another answer).
	ReasonUnawaitedAnswer = "unawaited_answer"
)

// Marshal encodes an envelope, stamping the current Version.
func (m Inbound) Marshal() ([]byte, error) { m.V = Version; return json.Marshal(m) }

// Marshal encodes an envelope, stamping the current Version.
func (m Reply) Marshal() ([]byte, error) { m.V = Version; return json.Marshal(m) }

// Marshal encodes an envelope, stamping the current Version.
func (m DeadLetter) Marshal() ([]byte, error) { m.V = Version; return json.Marshal(m) }

// DecodeInbound decodes and validates an Inbound envelope.
func DecodeInbound(data []byte) (*Inbound, error) {
	var m Inbound
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("events: decode envelope: %w", err)
	}
	if err := checkVersion(m.V); err != nil {
		return nil, err
	}
	if m.WorkspaceID == "" || m.ActivityID == "" {
		return nil, fmt.Errorf("events: inbound envelope lacks workspace_id or activity_id")
	}
	return &m, nil
}

// DecodeReply decodes and validates a Reply envelope.
func DecodeReply(data []byte) (*Reply, error) {
	var m Reply
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("events: decode envelope: %w", err)
	}
	if err := checkVersion(m.V); err != nil {
		return nil, err
	}
	if m.WorkspaceID == "" || m.ActivityID == "" {
		return nil, fmt.Errorf("events: reply envelope lacks workspace_id or activity_id")
	}
	switch m.Source {
	case SourceCanvasUser, SourceSelf:
	case SourcePeerAgent:
		if m.TargetWorkspaceID == "" {
			return nil, fmt.Errorf("events: peer reply to activity %s lacks target_workspace_id", m.ActivityID)
		}
	default:
		return nil, fmt.Errorf("events: reply to activity %s has unknown source %q", m.ActivityID, m.Source)
	}
	return &m, nil
}

// DecodeDeadLetter decodes a DeadLetter envelope.
func DecodeDeadLetter(data []byte) (*DeadLetter, error) {
	var m DeadLetter
	if err := decode(data, &m, &m.V); err != nil {
		return nil, err
	}
	return &m, nil
}

func decode(data []byte, into any, v *int) error {
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("events: decode envelope: %w", err)
	}
	return checkVersion(*v)
}

func checkVersion(v int) error {
	if v < 1 || v > Version {
		return fmt.Errorf("%w: v=%d (this build reads 1..%d)", ErrUnsupportedVersion, v, Version)
	}
	return nil
}

// ReplyMessageID derives the A2A messageId of the reply to an inbound
// activity: a name-based UUID (version 5 layout, SHA-1) of the activity id.
// It is stable across retries and processes, so the platform's queue
// de-duplicates a re-sent peer reply.
func ReplyMessageID(activityID string) string {
	return NameUUID("molecule-relay/reply/" + activityID)
}

// NameUUID returns the name-based UUID of name: the first 16 bytes of
// SHA-1(name) with the version 5 and RFC 4122 variant bits set, in
// canonical lower-case form. The same name always gives the same UUID, in
// every process and every release (a retry after an upgrade must send the
// id the first attempt sent). Unlike RFC 4122's version 5 (uuid.NewSHA1)
// no 16-byte namespace is hashed: callers put a fixed text prefix in name.
func NameUUID(name string) string {
	h := sha1.Sum([]byte(name))
	u := uuid.UUID(h[:16])
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}
