package events

// Conversation names every canvas user's conversation with a workspace:
// the platform does not tell canvas users apart (a canvas message has no
// sender id), so a workspace has one canvas conversation.
const ConversationCanvas = "canvas"

// ConversationOf names the conversation an inbound message belongs to, as a
// KV key token (HistoryKey):
//   - "canvas" for the canvas user (and the platform's cron, which posts
//     in the canvas chat);
//   - "peer-<workspace>" for a peer workspace, "self" for a self-message;
//   - with an A2A contextId (or, without one, a taskId), that context
//     within the sender's conversation: "canvas-ctx-<id>",
//     "peer-<workspace>-task-<id>". Scoping it by sender keeps a peer that
//     reuses (or guesses) another party's contextId out of its history.
//
// Every part outside [A-Za-z0-9_-], or longer than 64 bytes, is replaced by
// "h" and 32 hex digits of its SHA-256, so any id gives a valid key.
func ConversationOf(in *Inbound) string {
	var c string
	switch in.Source {
	case SourcePeerAgent:
		c = "peer-" + keyPart(in.SourceWorkspaceID)
	case SourceSelf:
		c = "self"
	default:
		c = ConversationCanvas
	}
	switch {
	case in.ContextID != "":
		c += "-ctx-" + keyPart(in.ContextID)
	case in.TaskID != "":
		c += "-task-" + keyPart(in.TaskID)
	}
	return c
}

// keyPart returns s when it is a short run of [A-Za-z0-9_-], else a hash.
func keyPart(s string) string {
	if s != "" && len(s) <= 64 && safeToken(s) {
		return s
	}
	return "h" + hash128(s)
}

func safeToken(s string) bool {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			return false
		}
	}
	return true
}
