package pipelinetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Sent is one message sent to the agent, as the platform's feed holds it.
type Sent struct {
	ActivityID string
	Text       string
	// From is the sending peer's workspace id, "" for a canvas user.
	From      string
	CreatedAt time.Time
}

// Canvas reports whether a canvas user sent the message.
func (s Sent) Canvas() bool { return s.From == "" }

// SendCanvas posts a canvas-user message to the agent and fails the test
// unless the platform queued it (200).
func (w *World) SendCanvas(text string) {
	w.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, body, err := w.Plat.SendCanvas(ctx, w.Agent.ID, text)
	if err != nil || st != http.StatusOK {
		w.T.Fatalf("pipelinetest: send canvas %q: %d %s %v", text, st, body, err)
	}
}

// SendPeer posts a message from peer i to the agent and fails the test
// unless the platform queued it (200).
func (w *World) SendPeer(i int, text string) {
	w.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, body, err := w.Plat.SendPeer(ctx, w.Peers[i], w.Agent.ID, text)
	if err != nil || st != http.StatusOK {
		w.T.Fatalf("pipelinetest: send peer %q: %d %s %v", text, st, body, err)
	}
}

// SendMixed sends n messages with unique texts "<prefix> <i>": every
// third from a canvas user, the others alternating between the peers (all
// canvas when there are no peers).
func (w *World) SendMixed(prefix string, n int) {
	w.T.Helper()
	for i := range n {
		text := fmt.Sprintf("%s %d", prefix, i)
		if len(w.Peers) == 0 || i%3 == 0 {
			w.SendCanvas(text)
		} else {
			w.SendPeer(i%len(w.Peers), text)
		}
	}
}

// Sent returns every message the agent's feed holds or held (rows
// pruned later are remembered), oldest first, excluding rows a poller
// must skip (the agent's own notifies, uploads, self-messages).
func (w *World) Sent() []Sent {
	w.T.Helper()
	for _, raw := range w.Plat.Rows(w.Agent.ID) {
		m, err := molecule.ParseRow(raw, w.Agent.ID)
		if err != nil {
			w.T.Fatalf("pipelinetest: the double wrote a row the client cannot parse: %v", err)
		}
		if m.Skip(false) != "" {
			continue
		}
		w.mu.Lock()
		if _, ok := w.sent[m.ActivityID]; !ok {
			w.sent[m.ActivityID] = Sent{ActivityID: m.ActivityID, Text: m.Text, From: m.SourceID, CreatedAt: m.CreatedAt}
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	out := make([]Sent, 0, len(w.sent))
	for _, s := range w.sent {
		out = append(out, s)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// SentText returns the sent message with the given text.
func (w *World) SentText(text string) Sent {
	w.T.Helper()
	for _, s := range w.Sent() {
		if s.Text == text {
			return s
		}
	}
	w.T.Fatalf("pipelinetest: no message %q on the agent's feed", text)
	return Sent{}
}

// Replies is the number of replies the platform accepted from the agent:
// its notifies plus its A2A posts to the peers.
func (w *World) Replies() int {
	n := len(w.Plat.Notifications(w.Agent.ID))
	for _, p := range w.Peers {
		for _, c := range w.Plat.A2ACalls(p.ID) {
			if c.CallerID == w.Agent.ID {
				n++
			}
		}
	}
	return n
}

// WaitReplies waits until the platform accepted at least n replies.
func (w *World) WaitReplies(n int, within time.Duration) {
	w.T.Helper()
	Eventually(w.T, within, fmt.Sprintf("%d replies", n), func() bool { return w.Replies() >= n })
}

// PeerReply is the part of a reply's JSON-RPC body the checks read.
type PeerReply struct {
	Params struct {
		Message struct {
			Role      string `json:"role"`
			MessageID string `json:"messageId"`
			Parts     []struct {
				Kind string `json:"kind"`
				Text string `json:"text"`
			} `json:"parts"`
			Metadata struct {
				InReplyTo string `json:"in_reply_to"`
			} `json:"metadata"`
		} `json:"message"`
	} `json:"params"`
}

// Text joins the reply's text parts.
func (r *PeerReply) Text() string {
	var b strings.Builder
	for _, p := range r.Params.Message.Parts {
		if p.Kind == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// PeerReplies returns the agent's A2A posts to peer, decoded, in order.
func (w *World) PeerReplies(peer string) []PeerReply {
	w.T.Helper()
	var out []PeerReply
	for _, c := range w.Plat.A2ACalls(peer) {
		if c.CallerID != w.Agent.ID {
			continue
		}
		var r PeerReply
		if err := json.Unmarshal(c.Body, &r); err != nil {
			w.T.Fatalf("pipelinetest: a2a body to %s: %v", peer, err)
		}
		out = append(out, r)
	}
	return out
}

// CheckExactlyOnce checks that every message in sent got exactly one
// reply, in the right place, with the right fields, and that no other
// reply was posted:
//   - canvas → one notify on the agent with "echo: <text>";
//   - peer → one A2A post to that peer with X-Workspace-ID = agent, role
//     "agent", messageId = events.ReplyMessageID(activity id),
//     metadata.in_reply_to = activity id and "echo: <text>".
//
// It uses t (not w.T) so subtests can report.
func (w *World) CheckExactlyOnce(t testing.TB, sent []Sent) {
	t.Helper()
	notes := map[string]int{}
	for _, n := range w.Plat.Notifications(w.Agent.ID) {
		notes[n.Message]++
	}
	byPeer := map[string]map[string][]PeerReply{} // peer → in_reply_to → replies
	for _, p := range w.Peers {
		byPeer[p.ID] = map[string][]PeerReply{}
		for _, r := range w.PeerReplies(p.ID) {
			byPeer[p.ID][r.Params.Message.Metadata.InReplyTo] = append(byPeer[p.ID][r.Params.Message.Metadata.InReplyTo], r)
		}
	}
	wantNotes, wantA2A := 0, map[string]int{}
	for _, s := range sent {
		want := "echo: " + s.Text
		if s.Canvas() {
			wantNotes++
			if notes[want] != 1 {
				t.Errorf("canvas message %q (activity %s): %d notifies %q, want exactly 1", s.Text, s.ActivityID, notes[want], want)
			}
			continue
		}
		wantA2A[s.From]++
		got := byPeer[s.From][s.ActivityID]
		if len(got) != 1 {
			t.Errorf("peer message %q (activity %s): %d replies to peer %s, want exactly 1", s.Text, s.ActivityID, len(got), s.From)
			continue
		}
		r := got[0]
		if r.Params.Message.Role != "agent" || r.Params.Message.MessageID != events.ReplyMessageID(s.ActivityID) || r.Text() != want {
			t.Errorf("peer reply to %s: role %q messageId %q text %q; want agent, %s, %q",
				s.ActivityID, r.Params.Message.Role, r.Params.Message.MessageID, r.Text(), events.ReplyMessageID(s.ActivityID), want)
		}
	}
	total := 0
	for _, n := range notes {
		total += n
	}
	if total != wantNotes {
		t.Errorf("%d notifies posted, want %d (one per canvas message)", total, wantNotes)
	}
	for _, p := range w.Peers {
		n := len(w.PeerReplies(p.ID))
		if n != wantA2A[p.ID] {
			t.Errorf("%d replies posted to peer %s, want %d", n, p.ID, wantA2A[p.ID])
		}
	}
	// The header the platform reads for the caller (docs/protocol.md §6).
	for _, r := range w.Plat.Requests() {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.Path, "/a2a") || strings.Contains(r.Path, w.Agent.ID) {
			continue
		}
		if got := r.Header.Get("X-Workspace-ID"); got != w.Agent.ID {
			t.Errorf("reply POST %s carried X-Workspace-ID %q, want the agent %s", r.Path, got, w.Agent.ID)
		}
	}
}

// Requests counts the double's recorded requests with method ("" any)
// whose path contains part and whose status is status (0 any).
func (w *World) Requests(method, part string, status int) int {
	n := 0
	for _, r := range w.Plat.Requests() {
		if (method == "" || r.Method == method) && strings.Contains(r.Path, part) && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}
