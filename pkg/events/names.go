package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Subject prefixes. A workspace id is appended as the last token, for example
// "molecule.inbound.35637291-d55e-4553-896c-13c2e02fe4f7".
const (
	// SubjectInboundPrefix carries Inbound envelopes from the poller to the
	// dispatcher.
	SubjectInboundPrefix = "molecule.inbound"
	// SubjectReplyPrefix carries Reply envelopes from the dispatcher to the
	// replier.
	SubjectReplyPrefix = "molecule.reply"
	// SubjectDLQPrefix carries DeadLetter envelopes; the stage name is the
	// token after the prefix: molecule.dlq.<stage>.<workspace>.
	SubjectDLQPrefix = "molecule.dlq"
	// SubjectMemoryPrefix carries conversation memory (internal/memory): one
	// message per recorded set of turns, on
	// molecule.memory.<workspace>.<conversation> (MemorySubject).
	SubjectMemoryPrefix = "molecule.memory"
	// SubjectPollersPrefix carries core NATS requests, stored by no
	// stream: "does another process here poll this workspace?", on
	// molecule.pollers.<workspace> (PollersSubject), answered with its
	// instance id by each relay process that polls it and keeps a reply
	// ledger (internal/relay).
	SubjectPollersPrefix = "molecule.pollers"
	// SubjectPollGroupPrefix carries core NATS liveness probes of poller
	// group members, stored by no stream: each member answers on
	// molecule.pollgroup.<group>.<instance> (PollGroupMemberSubject), and
	// the server's "no responders" says that it is gone
	// (internal/pollgroup/probe.go).
	SubjectPollGroupPrefix = "molecule.pollgroup"
)

// Stream names. One stream per kind of envelope.
const (
	// StreamInbound holds inbound messages (work-queue retention).
	StreamInbound = "MOLECULE_INBOUND"
	// StreamReply holds replies waiting to be posted (work-queue retention).
	StreamReply = "MOLECULE_REPLY"
	// StreamDLQ holds dead letters (limits retention, kept for inspection).
	StreamDLQ = "MOLECULE_DLQ"
	// StreamMemory holds conversation memory (limits retention: the last
	// TopologyConfig.HistoryTurns messages per conversation subject, each
	// at most TopologyConfig.HistoryTTL old).
	StreamMemory = "MOLECULE_MEMORY"
)

// Durable consumer names. They are fixed so that autoscalers (KEDA's
// nats-jetstream scaler) and the status command can look them up.
const (
	// ConsumerDispatcher is the dispatcher workers' shared pull consumer on
	// StreamInbound.
	ConsumerDispatcher = "dispatcher"
	// ConsumerReplier is the repliers' shared pull consumer on StreamReply.
	ConsumerReplier = "replier"
)

// Key-value bucket names.
const (
	// BucketCursors holds one poll cursor per workspace (key: workspace id),
	// advanced only with compare-and-set on the key's revision.
	BucketCursors = "molecule_cursors"
	// BucketPollerStatus holds the poller's last observation of each
	// workspace (generation, last poll, heartbeat) for the status command.
	BucketPollerStatus = "molecule_poller_status"
	// BucketHandled records inbound messages whose handler finished (key:
	// HandledKey), so a redelivery after a lost ack does not run the handler
	// again.
	BucketHandled = "molecule_handled"
	// BucketReplies records replies that are being or have been posted (key:
	// ReplyKey), so a reply is posted at most once.
	BucketReplies = "molecule_replies"
	// BucketMCPLeases holds one lease per workspace served by a
	// molecule-relay mcp instance (key: workspace id), so a second
	// instance on the same workspace is refused.
	BucketMCPLeases = "molecule_mcp_leases"
	// BucketPollerGroups holds the poller groups (MOLECULE_POLLER_GROUP):
	// per group its members' leases (key: <group>.m.<instance>) and which
	// member polls each workspace (key: <group>.c.<workspace>), created
	// by the first member, not by the topology (internal/pollgroup).
	BucketPollerGroups = "molecule_poller_groups"
	// BucketHistory held the recent turns of each conversation (key:
	// HistoryKey) before conversation memory moved to StreamMemory. It is
	// no longer created; where an earlier version left it, internal/memory
	// reads it through (a conversation's turns there are carried over to
	// the stream on its first read) until its TTL empties it.
	BucketHistory = "molecule_history"
	// BucketAsks records the questions handlers ask peers and wait for
	// (key: AskKey): created before the question is sent, it receives the
	// peer's answer, routed there by the dispatcher.
	BucketAsks = "molecule_asks"
)

// Stage names, used in dead-letter subjects and envelopes.
const (
	StagePoller     = "poller"
	StageDispatcher = "dispatcher"
	StageReplier    = "replier"
)

// InboundSubject returns the subject an inbound message for workspace is
// published on.
func InboundSubject(workspace string) string { return SubjectInboundPrefix + "." + workspace }

// ReplySubject returns the subject a reply from workspace is published on.
func ReplySubject(workspace string) string { return SubjectReplyPrefix + "." + workspace }

// PollersSubject returns the subject on which relay processes that poll
// workspace answer who they are.
func PollersSubject(workspace string) string { return SubjectPollersPrefix + "." + workspace }

// PollGroupMemberSubject returns the subject on which a member of a
// poller group answers its liveness probes.
func PollGroupMemberSubject(group, instance string) string {
	return SubjectPollGroupPrefix + "." + group + "." + instance
}

// DLQSubject returns the subject a dead letter of stage for workspace is
// published on.
func DLQSubject(stage, workspace string) string {
	return SubjectDLQPrefix + "." + stage + "." + workspace
}

// InboundMsgID is the Nats-Msg-Id of an inbound publish:
// "<workspace>:<activity id>". The inbound stream's duplicate window drops a
// second publish of the same activity row (a poller that crashed before
// saving its cursor, two pollers racing, an overlap re-read).
func InboundMsgID(workspace, activityID string) string { return workspace + ":" + activityID }

// ReplyMsgID is the Nats-Msg-Id of a reply publish, derived from the inbound
// activity id so a dispatcher redelivery cannot enqueue the reply twice.
func ReplyMsgID(workspace, activityID string) string { return "reply:" + workspace + ":" + activityID }

// HandledKey is the BucketHandled key of an inbound message.
func HandledKey(workspace, activityID string) string { return kvKey(workspace, activityID) }

// PeerMessageKey is the BucketHandled key that claims a peer's A2A
// messageId for the activity row that first carried it: the platform's poll
// queue writes a new row for every POST of the same messageId, so a sender
// that posted twice (it died between the platform's acceptance and its own
// record) is de-duplicated here, at the receiver. It is scoped to the
// sender workspace (another sender may reuse an id) and the messageId is
// hashed (it may hold any character). Its four tokens never collide with
// the two of HandledKey.
func PeerMessageKey(workspace, sender, messageID string) string {
	return sanitizeKeyToken(workspace) + ".msg." + sanitizeKeyToken(sender) + "." + hash128(messageID)
}

// InterimKey is the BucketHandled key that records an interim message of
// the agent API (internal/agentapi) before it is posted to a canvas user, so a
// re-run of the handler after a redelivery does not post it again. Its
// three tokens never collide with HandledKey's two or PeerMessageKey's
// four.
func InterimKey(workspace, interimID string) string {
	return sanitizeKeyToken(workspace) + ".interim." + sanitizeKeyToken(interimID)
}

// AskKey is the BucketAsks key of the question workspace sent with
// messageID. The messageId is hashed: it arrives back from a peer in
// metadata.in_reply_to_message_id and may hold any character.
func AskKey(workspace, messageID string) string {
	return sanitizeKeyToken(workspace) + ".ask." + hash128(messageID)
}

// AwaitingKey is the BucketAsks key listing the questions workspace
// awaits from peer, oldest first: a peer that answers without our ids
// (a TypeScript channel or Python SDK agent) is matched through it
// (internal/delegate). Its tokens never collide with AskKey's.
func AwaitingKey(workspace, peer string) string {
	return sanitizeKeyToken(workspace) + ".awaiting." + sanitizeKeyToken(peer)
}

// StreakKey is the BucketAsks key counting the consecutive messages
// workspace answered for peer, a peer that carries no hop count (the
// dispatcher's loop guard).
func StreakKey(workspace, peer string) string {
	return sanitizeKeyToken(workspace) + ".streak." + sanitizeKeyToken(peer)
}

// CancelKey is the BucketAsks key of sender's tasks/cancel of taskID on
// workspace; CancelFilter matches every cancel, for a watch.
func CancelKey(workspace, sender, taskID string) string {
	return sanitizeKeyToken(workspace) + ".cancel." + sanitizeKeyToken(sender) + "." + hash128(taskID)
}

// CancelFilter is the key filter of every CancelKey.
const CancelFilter = "*.cancel.*.*"

// ReplyKey is the BucketReplies key of the reply to an inbound message.
func ReplyKey(workspace, activityID string) string { return kvKey(workspace, activityID) }

// HistoryKey is the BucketHistory key of a conversation of workspace
// (ConversationOf gives conversation, already a safe token).
func HistoryKey(workspace, conversation string) string {
	return kvKey(workspace, conversation)
}

// MemorySubject is the StreamMemory subject of a conversation of
// workspace: molecule.memory.<workspace>.<conversation>, both tokens made
// safe as HistoryKey makes them.
func MemorySubject(workspace, conversation string) string {
	return SubjectMemoryPrefix + "." + kvKey(workspace, conversation)
}

// MemoryWorkspaceSubjects is the filter of every conversation subject of
// workspace in StreamMemory.
func MemoryWorkspaceSubjects(workspace string) string {
	return SubjectMemoryPrefix + "." + sanitizeKeyToken(workspace) + ".>"
}

// MemoryMsgID is the Nats-Msg-Id of the memory message recording the
// turns of roles (for example "user+agent") of an inbound message in a
// conversation, so a redelivery or replay within the stream's duplicate
// window does not store them twice.
func MemoryMsgID(workspace, conversation, activityID, roles string) string {
	return "mem:" + workspace + ":" + conversation + ":" + activityID + ":" + roles
}

// kvKey joins workspace and activity id with a dot. Both are UUIDs on the
// real platform; anything outside the KV key alphabet is replaced so a
// malformed id cannot make a key invalid.
func kvKey(workspace, activityID string) string {
	return sanitizeKeyToken(workspace) + "." + sanitizeKeyToken(activityID)
}

func sanitizeKeyToken(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		default:
			return '_'
		}
	}, s)
}

// ValidateWorkspaceID reports whether id can be used as a subject token: it
// must be non-empty and contain no '.', '*', '>' or whitespace.
func ValidateWorkspaceID(id string) error {
	if id == "" {
		return fmt.Errorf("events: empty workspace id")
	}
	if strings.ContainsAny(id, ".*> \t\r\n") {
		return fmt.Errorf("events: workspace id %q contains a character not allowed in a NATS subject token", id)
	}
	return nil
}

// hash128 is 32 hex digits of s's SHA-256: a key token for an id of any
// length and alphabet.
func hash128(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
