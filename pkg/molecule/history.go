package molecule

// HistoryTurn is one entry of params.metadata.history: the canvas sends
// the last 20 messages of its chat with every message, oldest first,
// as {"role": "user"|"agent", "parts": [{"kind": "text", "text": …}]}
// (molecule-core canvas/src/components/tabs/ChatTab.tsx).
type HistoryTurn struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

// maxHistoryTurns bounds what is read of a sender's list: the canvas sends
// 20; anything beyond is not ours to keep.
const maxHistoryTurns = 100

// parseHistory reads params.metadata.history tolerantly: a missing or
// malformed list gives nil, an entry that is not an object with a known
// role and some text is skipped, and nothing here ever rejects the row.
// Text comes from the entry's text parts (kind or type "text"), or a
// plain "content"/"text" string as other senders write it.
func parseHistory(params rawObject) []HistoryTurn {
	meta, err := params.object("metadata", "")
	if err != nil || meta == nil {
		return nil
	}
	list, _, err := meta.array("history", "")
	if err != nil {
		return nil
	}
	if len(list) > maxHistoryTurns {
		list = list[len(list)-maxHistoryTurns:]
	}
	var out []HistoryTurn
	for _, raw := range list {
		// The page was validated once (rawjson.go): split, never decode.
		if jsonKind(raw) != '{' {
			continue
		}
		e := splitObject(raw)
		role := e.lenientStr("role")
		switch role {
		case "user", "agent":
		case "assistant":
			role = "agent"
		default:
			continue
		}
		if text := historyText(e); text != "" {
			out = append(out, HistoryTurn{Role: role, Text: text})
		}
	}
	return out
}

func historyText(e rawObject) string {
	if parts, _, err := e.array("parts", ""); err == nil && len(parts) > 0 {
		var text string
		for _, raw := range parts {
			if jsonKind(raw) != '{' {
				continue
			}
			p := splitObject(raw)
			if p.lenientStr("kind") == "text" || p.lenientStr("type") == "text" {
				text += p.lenientStr("text")
			}
		}
		return text
	}
	if s := e.lenientStr("content"); s != "" {
		return s
	}
	return e.lenientStr("text")
}
