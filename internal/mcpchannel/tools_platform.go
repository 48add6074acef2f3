package mcpchannel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/google/uuid"
	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// The activity ids the tools give their own records, apart from inbound
// activities: a task of delegate_task(_async) and a message of
// send_message_to_user.
const (
	taskActivityPrefix = "mcp-task-"
	userActivityPrefix = "mcp-user-"
)

// sendWindow is how long send_message_to_user takes the same message for
// a retry when no idempotency_key is given.
const sendWindow = 10 * time.Minute

// asClient is the client of the watched workspace named by _as_workspace
// (or workspace_id where a tool has no target), or of the only one.
func (s *Server) asClient(req mcp.CallToolRequest, names ...string) (*molecule.Client, error) {
	for _, n := range names {
		if ws := strings.TrimSpace(req.GetString(n, "")); ws != "" {
			return s.client(ws)
		}
	}
	return s.client("")
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (s *Server) toolInfo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.asClient(req, "_as_workspace", "workspace_id")
	if err != nil {
		return toolError("%v", err), nil
	}
	info, err := c.Workspace(ctx, c.WorkspaceID())
	if err != nil {
		return toolError("get_workspace_info: %v", err), nil
	}
	if info.Removed {
		hint := info.Hint
		if hint == "" {
			hint = "Create a new workspace and token in the canvas."
		}
		return toolError("workspace %s was deleted on the platform. %s", info.ID, hint), nil
	}
	if len(info.Raw) > 0 {
		return mcp.NewToolResultText(string(info.Raw)), nil
	}
	return jsonResult(info)
}

// question reads a delegation's target and task: workspace_id (the
// TypeScript channel's name) or peer_id (ours).
func question(req mcp.CallToolRequest) (handler.Question, error) {
	q := handler.Question{
		PeerID:  strings.TrimSpace(req.GetString("workspace_id", "")),
		Text:    req.GetString("task", ""),
		Timeout: time.Duration(req.GetFloat("timeout_seconds", 0) * float64(time.Second)),
	}
	if q.PeerID == "" {
		q.PeerID = strings.TrimSpace(req.GetString("peer_id", ""))
	}
	if q.PeerID == "" || strings.TrimSpace(q.Text) == "" {
		return q, errors.New("workspace_id (the peer, from list_peers) and task are required")
	}
	return q, nil
}

// asker is the relay's delegation asker (internal/delegate).
func (s *Server) asker() (*delegate.Asker, error) {
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	if be.rt == nil {
		return nil, handler.ErrNoAgent
	}
	return be.rt.Asker()
}

// toolDelegate asks a peer and waits. With activity_id it asks as part of
// answering that message (the handler's agent API: its conversation and
// hop count); else as a task of its own, through the same ask records.
func (s *Server) toolDelegate(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := question(req)
	if err != nil {
		return toolError("%v", err), nil
	}
	if id := strings.TrimSpace(req.GetString("activity_id", "")); id != "" {
		p, err := s.cfg.Channel.find(selector{ActivityID: id})
		if err != nil {
			return toolError("%v", err), nil
		}
		ans, err := p.req.AskPeer(ctx, q)
		if err != nil {
			return agentError(ToolDelegate, err), nil
		}
		return jsonResult(ans)
	}
	c, err := s.asClient(req, "_as_workspace")
	if err != nil {
		return toolError("%v", err), nil
	}
	a, err := s.asker()
	if err != nil {
		return agentError(ToolDelegate, err), nil
	}
	ans, err := a.Ask(ctx, delegate.Scope{Workspace: c.WorkspaceID(), Activity: taskActivityPrefix + uuid.NewString(), N: 1}, q)
	if err != nil {
		return agentError(ToolDelegate, err), nil
	}
	return jsonResult(ans)
}

// toolDelegateAsync sends a task and returns its id once the platform took
// it. The task is an ask record (internal/delegate) keyed by workspace, peer and
// task, so the same call again is the same task; the dispatcher stores the
// peer's answer in it whichever session runs then.
func (s *Server) toolDelegateAsync(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	q, err := question(req)
	if err != nil {
		return toolError("%v", err), nil
	}
	c, err := s.asClient(req, "_as_workspace")
	if err != nil {
		return toolError("%v", err), nil
	}
	a, err := s.asker()
	if err != nil {
		return agentError(ToolDelegateAsync, err), nil
	}
	be, _ := s.backend()
	ws := c.WorkspaceID()
	scope := delegate.Scope{Workspace: ws, Activity: taskActivityPrefix + digest(ws, q.PeerID, q.Text), N: 1}
	taskID := delegate.MessageID(ws, scope.Activity, 1)
	q.Timeout = be.rt.Topo.Config.AskTTL // capped by the asker to the record's lifetime
	asked := make(chan error, 1)
	go func() {
		// Not the call's context: the wait outlives the tool call (and a
		// cancelled wait would mark the task abandoned).
		_, err := a.Ask(context.Background(), scope, q)
		asked <- err
	}()
	key := events.AskKey(ws, taskID)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		sent <- waitKey(wctx, be.rt.Topo.Asks, key, func(b []byte) bool {
			var r events.AskRecord
			return json.Unmarshal(b, &r) == nil && (!r.SentAt.IsZero() || r.State == events.AskAnswered)
		})
	}()
	select {
	case err := <-asked:
		if err != nil {
			return agentError(ToolDelegateAsync, err), nil
		}
	case err := <-sent:
		if err != nil {
			return toolError("delegate_task_async: task %s not confirmed sent (%v); check_task_status tells", taskID, err), nil
		}
	}
	return jsonResult(map[string]string{"task_id": taskID, "delegation_id": taskID, "status": "in_progress", "peer": q.PeerID})
}

// taskStatus is check_task_status's view of an ask record, in the
// TypeScript channel's status words.
type taskStatus struct {
	TaskID    string              `json:"task_id"`
	Status    string              `json:"status"`
	Peer      string              `json:"peer"`
	CreatedAt time.Time           `json:"created_at"`
	SentAt    time.Time           `json:"sent_at,omitzero"`
	Deadline  time.Time           `json:"deadline"`
	Answer    *handler.PeerAnswer `json:"answer,omitempty"`
}

func statusOf(r *events.AskRecord, now time.Time) taskStatus {
	st := taskStatus{TaskID: r.MessageID, Peer: r.Peer, CreatedAt: r.CreatedAt, SentAt: r.SentAt, Deadline: r.Deadline}
	switch {
	case r.State == events.AskAnswered:
		st.Status = "completed"
		if a := r.Answer; a != nil {
			st.Answer = &handler.PeerAnswer{Text: a.Text, Attachments: a.Attachments, MessageID: r.MessageID, ActivityID: a.ActivityID}
		}
	case r.State == events.AskAbandoned || now.After(r.Deadline):
		st.Status = "failed" // no answer in time
	case r.SentAt.IsZero():
		st.Status = "pending"
	default:
		st.Status = "in_progress"
	}
	return st
}

func (s *Server) toolTaskStatus(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.asClient(req, "_as_workspace")
	if err != nil {
		return toolError("%v", err), nil
	}
	be, err := s.backend()
	if err != nil {
		return toolError("%v", err), nil
	}
	if be.rt == nil || be.rt.Topo.Asks == nil {
		return agentError(ToolTaskStatus, handler.ErrNoAgent), nil
	}
	kv, ws := be.rt.Topo.Asks, c.WorkspaceID()
	read := func(key string) (*events.AskRecord, error) {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		var r events.AskRecord
		return &r, json.Unmarshal(e.Value(), &r)
	}
	now := time.Now()
	if id := strings.TrimSpace(req.GetString("task_id", "")); id != "" {
		r, err := read(events.AskKey(ws, id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return jsonResult(map[string]string{"task_id": id, "status": "not_found"})
		}
		if err != nil {
			return toolError("check_task_status: %v", err), nil
		}
		return jsonResult(statusOf(r, now))
	}
	one := events.AskKey(ws, "x") // <workspace>.ask.<hash>: every ask of ws
	lister, err := kv.ListKeysFiltered(ctx, one[:strings.LastIndex(one, ".")]+".*")
	if err != nil {
		return toolError("check_task_status: %v", err), nil
	}
	var all []taskStatus
	for key := range lister.Keys() {
		if r, err := read(key); err == nil && strings.HasPrefix(r.Activity, taskActivityPrefix) {
			all = append(all, statusOf(r, now))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].CreatedAt.After(all[j].CreatedAt) })
	n := len(all)
	if len(all) > 10 {
		all = all[:10]
	}
	return jsonResult(map[string]any{"delegations": all, "count": n})
}

// toolSendToUser posts to the canvas unprompted through the replier: the
// message is a reply envelope with an activity id of its own, so the
// replier's posting record makes it effectively once (a redelivery, a
// crash mid-post or a repeated call with the same key posts nothing more)
// and its rate budget paces it.
func (s *Server) toolSendToUser(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text := req.GetString("message", "")
	if strings.TrimSpace(text) == "" {
		text = req.GetString("text", "")
	}
	if strings.TrimSpace(text) == "" {
		return toolError("message is required"), nil
	}
	var atts []events.Attachment
	for _, a := range req.GetStringSlice("attachments", nil) {
		if p, local := filecache.LocalPath(a); local {
			atts = append(atts, events.Attachment{URI: a, Name: filepath.Base(p)})
			continue
		}
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return toolError("attachment %q: attach an absolute local path (uploaded) or an http(s) URL", a), nil
		}
		atts = append(atts, events.Attachment{URI: a, Name: path.Base(u.Path)})
	}
	c, err := s.asClient(req, "_as_workspace", "workspace_id")
	if err != nil {
		return toolError("%v", err), nil
	}
	be, err := s.backend()
	if err != nil {
		return toolError("%v", err), nil
	}
	ws := c.WorkspaceID()
	key := strings.TrimSpace(req.GetString("idempotency_key", ""))
	if key == "" {
		var b strings.Builder
		for _, a := range atts {
			b.WriteString(a.URI + "\n")
		}
		key = digest(text, b.String(), time.Now().UTC().Truncate(sendWindow).Format(time.RFC3339))
	}
	if atts, err = uploadLocal(ctx, be, ws, key, atts); err != nil {
		return toolError("send_message_to_user: %v", err), nil
	}
	o, err := s.postToUser(ctx, be, ws, text, atts, key)
	if err != nil {
		return toolError("send_message_to_user: %v", err), nil
	}
	return replyResult(o, fmt.Sprintf("Message to the canvas user of %s (key %s)", ws, key),
		fmt.Sprintf("Sent to the canvas user of %s (posted once; key %s).", ws, key)), nil
}

// postToUser queues text for the canvas user of ws as a reply envelope
// with an activity id derived from key, and waits up to postWait for what
// became of it (awaitReply).
func (s *Server) postToUser(ctx context.Context, be Backend, ws, text string, atts []events.Attachment, key string) (replyOutcome, error) {
	if be.rt == nil {
		return replyOutcome{}, handler.ErrNoAgent
	}
	activity := userActivityPrefix + digest(ws, key)
	now := time.Now().UTC()
	data, err := events.Reply{WorkspaceID: ws, ActivityID: activity, Source: events.SourceCanvasUser, Text: text, Attachments: atts,
		InboundCreatedAt: now, HandledAt: now}.Marshal()
	if err != nil {
		return replyOutcome{}, err
	}
	m := &nats.Msg{Subject: events.ReplySubject(ws), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, events.ReplyMsgID(ws, activity))
	if err := stage.RetryWrite(ctx, func() error { _, err := be.rt.Conn.JS.PublishMsg(ctx, m); return err }); err != nil {
		return replyOutcome{}, fmt.Errorf("not queued: %w", err)
	}
	return awaitReply(ctx, be, ws, activity, now), nil
}

func (s *Server) toolCommitMemory(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.asClient(req, "_as_workspace")
	if err != nil {
		return toolError("%v", err), nil
	}
	res, err := c.CommitMemory(ctx, req.GetString("content", ""), req.GetString("scope", ""))
	if errors.Is(err, molecule.ErrMemoryNotConfigured) {
		// Not kept as a conversation turn instead: a turn is bounded by
		// MOLECULE_HISTORY_TURNS and would read as something said in the
		// chat, so "saved" would be untrue (docs/agentapi.md).
		return toolError("commit_memory: nothing was saved: the platform has no memory plugin (its MEMORY_PLUGIN_URL is not set; it answers 503 to every memory call). " +
			"Ask the platform's operator to configure one; until then, recall_memory searches the relay's conversation memory (the recent turns of the canvas chat)."), nil
	}
	if err != nil {
		return toolError("commit_memory: %v", err), nil
	}
	return jsonResult(res)
}

func (s *Server) toolRecallMemory(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.asClient(req, "_as_workspace")
	if err != nil {
		return toolError("%v", err), nil
	}
	rows, err := c.RecallMemory(ctx, req.GetString("query", ""), req.GetString("scope", ""))
	if errors.Is(err, molecule.ErrMemoryNotConfigured) {
		return s.recallFromConversation(ctx, c.WorkspaceID(), req.GetString("query", ""))
	}
	if err != nil {
		return toolError("recall_memory: %v", err), nil
	}
	out := make([]json.RawMessage, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.Raw)
	}
	return jsonResult(out)
}

// recallFromConversation answers recall_memory from the relay's
// conversation memory when the platform has no memory plugin: the turns
// of ws's canvas conversation whose text holds query (all of them when
// query is empty), saying where they come from.
func (s *Server) recallFromConversation(ctx context.Context, ws, query string) (*mcp.CallToolResult, error) {
	const none = "recall_memory: the platform has no memory plugin (its MEMORY_PLUGIN_URL is not set; it answers 503 to every memory call)"
	be, err := s.backend()
	if err != nil || be.rt == nil {
		return toolError("%s, and this relay keeps no conversation memory to search instead", none), nil
	}
	mem, err := be.rt.Memory()
	if err != nil || !mem.On() {
		return toolError("%s, and this relay keeps no conversation memory to search instead (MOLECULE_HISTORY_TURNS=0)", none), nil
	}
	turns, err := mem.Load(ctx, ws, events.ConversationCanvas)
	if err != nil {
		return toolError("%s, and the relay's conversation memory could not be read: %v", none, err), nil
	}
	q := strings.ToLower(query)
	found := make([]handler.Turn, 0, len(turns))
	for _, t := range turns {
		if strings.Contains(strings.ToLower(t.Text), q) {
			found = append(found, t)
		}
	}
	return jsonResult(map[string]any{
		"source": "conversation",
		"note": "The platform has no memory plugin (MEMORY_PLUGIN_URL is not set), so nothing saved with commit_memory can be recalled. " +
			"These are the recent turns of the canvas chat that the relay keeps (MOLECULE_HISTORY_TURNS) and that match the query.",
		"turns": found,
	})
}
