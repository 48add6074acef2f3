package dispatcher

import "github.com/molecule-ai/molecule-relay/internal/events"

// LoopGuard says why an answer to in must not be sent, or "": in is a
// broadcast (sent to every agent of the org, it expects no answer; one
// would go to its sender as a peer message from each of them), in is
// itself a reply (InReplyTo set, or a peer's role "agent" message) and
// replyToReplies is off, or it reached maxHops. The dispatcher drops such
// replies; the agent API refuses such peer interims (docs/protocol.md §6:
// two auto-replying agents loop forever).
func LoopGuard(in *events.Inbound, replyToReplies bool, maxHops int) string {
	switch {
	case in.Kind == events.KindBroadcast:
		return "message is a broadcast (answered by no one)"
	case in.InReplyTo != "" && !replyToReplies:
		return "message is itself a reply"
	case in.Role == "agent" && in.Source == events.SourcePeerAgent && !replyToReplies:
		return "message is a peer agent's answer (role agent)"
	case in.Hops >= maxHops:
		return "hop limit reached"
	}
	return ""
}
