package mcpchannel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Tool names: the TypeScript channel's (molecule-mcp-claude-channel, the
// universal platform tools' names), plus dismiss, discover_peer and
// send_interim.
const (
	ToolReply         = "reply_to_workspace"
	ToolDismiss       = "dismiss"
	ToolPeers         = "list_peers"
	ToolDiscover      = "discover_peer"
	ToolDelegate      = "delegate_task"
	ToolDelegateAsync = "delegate_task_async"
	ToolTaskStatus    = "check_task_status"
	ToolInterim       = "send_interim"
	ToolInfo          = "get_workspace_info"
	ToolSendToUser    = "send_message_to_user"
	ToolCommitMemory  = "commit_memory"
	ToolRecallMemory  = "recall_memory"
)

// postWait bounds how long an answer tool waits, after the answer was
// recorded, for the replier to post it before saying it is on its way.
const postWait = 15 * time.Second

// hints are a tool's MCP annotations. Every tool talks to the platform
// (open world); only the read-only ones are harmless to repeat.
func hints(readOnly, destructive, idempotent bool) []mcp.ToolOption {
	return []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(readOnly),
		mcp.WithDestructiveHintAnnotation(destructive),
		mcp.WithIdempotentHintAnnotation(idempotent),
		mcp.WithOpenWorldHintAnnotation(true),
	}
}

func tool(name string, opts ...mcp.ToolOption) mcp.Tool { return mcp.NewTool(name, opts...) }

func with(h []mcp.ToolOption, opts ...mcp.ToolOption) []mcp.ToolOption { return append(opts, h...) }

// asWorkspace is the TypeScript channel's _as_workspace: which watched
// workspace a tool acts as.
var asWorkspace = mcp.WithString("_as_workspace", mcp.Description("watched workspace to act as (omit when only one is watched)"))

// needRelay answers with why not while no relay is attached (another
// session holds the channel): every tool needs it.
func (s *Server) needRelay(h server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if _, err := s.backend(); err != nil {
			return toolError("%v", err), nil
		}
		return h(ctx, req)
	}
}

func (s *Server) addTools() {
	add := func(t mcp.Tool, h server.ToolHandlerFunc) { s.mcp.AddTool(t, s.needRelay(h)) }
	activity := mcp.WithString("activity_id", mcp.Description("meta.activity_id of the message this is about"))
	// An answer is posted once per message: a second call is refused, so
	// repeating it changes nothing (idempotent), and it only adds a post.
	add(tool(ToolReply, with(hints(false, false, true),
		mcp.WithDescription("Answer a Molecule message shown as a channel event. Pass its activity_id (meta.activity_id). "+
			"Without activity_id the oldest waiting message of that sender is answered: the peer peer_id, or the canvas user when peer_id is empty. "+
			"The reply goes to /notify for a canvas user and to the peer over A2A, exactly once. "+
			"With no message waiting from that sender it starts a new message to it (to the canvas only when no message at all is waiting)."),
		mcp.WithString("text", mcp.Required(), mcp.Description("reply text (plain text or markdown)")),
		activity,
		mcp.WithString("peer_id", mcp.Description("meta.peer_id for a peer_agent message; empty for a canvas_user message")),
		mcp.WithString("workspace_id", mcp.Description("meta.workspace_id: the watched workspace that received the message")),
	)...), s.toolReply)
	add(tool(ToolDismiss, with(hints(false, false, true),
		mcp.WithDescription("Mark a Molecule message handled without replying. Until it is answered or dismissed it stays waiting and is shown again in the next session."),
		mcp.WithString("activity_id", mcp.Required(), mcp.Description("meta.activity_id of the message")),
	)...), s.toolDismiss)
	add(tool(ToolPeers, with(hints(true, false, true),
		mcp.WithDescription("List the peer workspaces a watched workspace may talk to (id, name, role, status)."),
		mcp.WithString("workspace_id", mcp.Description("watched workspace (omit when only one is watched)")),
		mcp.WithString("q", mcp.Description("case-insensitive filter on name or role")),
	)...), s.toolPeers)
	add(tool(ToolDiscover, with(hints(true, false, true),
		mcp.WithDescription("Resolve one workspace by id (name and URL), as seen from a watched workspace."),
		mcp.WithString("peer_id", mcp.Required(), mcp.Description("workspace id to resolve")),
		mcp.WithString("workspace_id", mcp.Description("watched workspace (omit when only one is watched)")),
	)...), s.toolDiscover)
	add(tool(ToolInfo, with(hints(true, false, true),
		mcp.WithDescription("Get a watched workspace's own record (id, name, status, URL, runtime, agent card)."),
		asWorkspace,
	)...), s.toolInfo)
	target := mcp.WithString("workspace_id", mcp.Description("the peer workspace to ask (from list_peers); peer_id is accepted too"))
	peerAlias := mcp.WithString("peer_id", mcp.Description("alias of workspace_id"))
	task := mcp.WithString("task", mcp.Required(), mcp.Description("what to ask the peer"))
	// Asking sends a message to another agent: not read-only, not
	// destructive, and a repeat asks again (the async form is keyed).
	add(tool(ToolDelegate, with(hints(false, false, false),
		mcp.WithDescription("Ask a peer workspace and wait for its answer (the relay waits even when the peer answers later through its own poll loop). "+
			"With activity_id, asked as part of answering that message (its conversation). For long work use delegate_task_async + check_task_status."),
		target, peerAlias, task, activity, asWorkspace,
		mcp.WithNumber("timeout_seconds", mcp.Description("how long to wait for the answer (default: the relay's MOLECULE_ASK_TIMEOUT)")),
	)...), s.toolDelegate)
	add(tool(ToolDelegateAsync, with(hints(false, false, true),
		mcp.WithDescription("Send a task to a peer and return at once with a task_id; poll with check_task_status. "+
			"The same task to the same peer within an hour is the same task (one message). The status survives a restart of Claude Code and of the relay."),
		target, peerAlias, task, asWorkspace,
	)...), s.toolDelegateAsync)
	add(tool(ToolTaskStatus, with(hints(true, false, true),
		mcp.WithDescription("Status of a task from delegate_task_async: pending (not yet sent), sent (the peer is working), answered (with the answer), abandoned (no answer in time). Without task_id, the recent tasks."),
		mcp.WithString("task_id", mcp.Description("task_id from delegate_task_async; omit to list recent tasks")),
		asWorkspace,
	)...), s.toolTaskStatus)
	add(tool(ToolInterim, with(hints(false, false, false),
		mcp.WithDescription("While answering a message: post an interim message (\"working on it…\") to its sender now, before the final reply."),
		mcp.WithString("text", mcp.Required(), mcp.Description("interim text")),
		activity,
	)...), s.toolInterim)
	add(tool(ToolSendToUser, with(hints(false, false, true),
		mcp.WithDescription("Post a message to the canvas user's chat unprompted (no message needs to be waiting): an acknowledgement, progress, a result. "+
			"Posted once: a retry with the same idempotency_key (by default the same message within 10 minutes) is not posted again."),
		mcp.WithString("message", mcp.Required(), mcp.Description("the chat text (text is accepted too)")),
		mcp.WithString("text", mcp.Description("alias of message")),
		mcp.WithArray("attachments", mcp.WithStringItems(), mcp.Description("http(s) URLs of files to attach (local paths are not uploaded)")),
		mcp.WithString("idempotency_key", mcp.Description("the same key is posted once; default: the message's content within a 10-minute window")),
		asWorkspace,
	)...), s.toolSendToUser)
	add(tool(ToolCommitMemory, with(hints(false, false, false),
		mcp.WithDescription("Save a fact to the platform's persistent memory of the workspace (POST /workspaces/:id/memories); it survives sessions and restarts. "+
			"Scopes: LOCAL (this workspace), TEAM (parent and siblings), GLOBAL (the org; root workspaces only)."),
		mcp.WithString("content", mcp.Required(), mcp.Description("what to remember; be specific")),
		mcp.WithString("scope", mcp.Enum("LOCAL", "TEAM", "GLOBAL"), mcp.Description("memory scope (default LOCAL)")),
		asWorkspace,
	)...), s.toolCommitMemory)
	add(tool(ToolRecallMemory, with(hints(true, false, true),
		mcp.WithDescription("Search the platform's persistent memory (GET /workspaces/:id/memories): LOCAL, TEAM and GLOBAL rows this workspace may read. An empty query returns them all."),
		mcp.WithString("query", mcp.Description("search text (empty: everything accessible)")),
		mcp.WithString("scope", mcp.Enum("LOCAL", "TEAM", "GLOBAL", ""), mcp.Description("only this scope (empty: all)")),
		asWorkspace,
	)...), s.toolRecallMemory)
	s.addFileTools(add)
	s.addPullTools(add) // pull.go: for clients that ignore channel events
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, args...))
}

func (s *Server) toolReply(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text := req.GetString("text", "")
	if strings.TrimSpace(text) == "" {
		return toolError("text is required"), nil
	}
	sel := selector{
		ActivityID:  strings.TrimSpace(req.GetString("activity_id", "")),
		WorkspaceID: strings.TrimSpace(req.GetString("workspace_id", "")),
		PeerID:      strings.TrimSpace(req.GetString("peer_id", "")),
	}
	sel.Canvas = sel.PeerID == "" && sel.ActivityID == ""
	p, err := s.cfg.Channel.find(sel)
	// Nothing waiting from that target: a new message to it, as the
	// TypeScript channel's reply_to_workspace always sends. Not to the
	// canvas while any message waits (a peer's, likely answered without its
	// peer_id), nor for an activity_id that is not waiting.
	if err != nil && sel.ActivityID == "" && (sel.PeerID != "" || s.cfg.Channel.Waiting() == 0) {
		return s.replyUnprompted(ctx, sel.WorkspaceID, sel.PeerID, text), nil
	}
	if err != nil {
		return toolError("%v", err), nil
	}
	return s.answer(ctx, p, handler.Answer{Text: text}), nil
}

// replyUnprompted sends text as a new message from watched workspace ws:
// to the canvas user through the replier, posted once (a retry of the same
// text within sendWindow is the same message); to peer over A2A as the
// TypeScript channel does (server.ts:802-870: message/send, role "user",
// one text part), with a messageId derived from the text, so a retried
// call is one message on the platform (one row per messageId since
// 2026-08) and for a relay peer (its dispatcher's messageId claim).
func (s *Server) replyUnprompted(ctx context.Context, ws, peer, text string) *mcp.CallToolResult {
	c, err := s.client(ws)
	if err != nil {
		return toolError("%v", err)
	}
	ws = c.WorkspaceID()
	window := time.Now().UTC().Truncate(sendWindow).Format(time.RFC3339)
	if peer == "" {
		be, err := s.backend()
		if err != nil {
			return toolError("%v", err)
		}
		key := digest(ToolReply, text, window)
		o, err := s.postToUser(ctx, be, ws, text, nil, key)
		if err != nil {
			return toolError("%s: no message is waiting, and a new one to the canvas user was not sent: %v", ToolReply, err)
		}
		return replyResult(o, fmt.Sprintf("No message was waiting: a new message to the canvas user of %s", ws),
			fmt.Sprintf("No message was waiting: sent a new message to the canvas user of %s (/notify).", ws))
	}
	_, err = c.SendA2A(ctx, molecule.A2AMessage{To: peer, Role: "user", Text: text,
		MessageID: events.NameUUID("molecule-relay/reply_to_workspace/" + digest(ws, peer, text, window))})
	if err != nil {
		return toolError("%s: no message from peer %s is waiting, and a new one to it was not sent: %v", ToolReply, peer, err)
	}
	return mcp.NewToolResultText(fmt.Sprintf("No message from peer %s was waiting: sent it a new message from %s (A2A).", peer, ws))
}

func (s *Server) toolDismiss(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := strings.TrimSpace(req.GetString("activity_id", ""))
	if id == "" {
		return toolError("activity_id is required"), nil
	}
	p, err := s.cfg.Channel.find(selector{ActivityID: id})
	if err != nil {
		return toolError("%v", err), nil
	}
	return s.answer(ctx, p, handler.Answer{NoReply: true}), nil
}

// answer gives a to p and reports what became of it: recorded (the
// handled record is the commitment), and posted when the replier did so
// within postWait.
func (s *Server) answer(ctx context.Context, p *pending, a handler.Answer) *mcp.CallToolResult {
	in := p.req.Message
	be, err := s.backend()
	if err != nil {
		return toolError("%v", err)
	}
	handedAt := time.Now()
	if err := s.cfg.Channel.take(p, a); err != nil {
		return toolError("%v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	if ok, err := waitHandled(cctx, p); !ok {
		return toolError("message %s: the answer was not taken (%v); the message will be shown again", in.ActivityID, errOr(err, "the session ended"))
	}
	var rec events.HandledRecord
	if err := waitKey(cctx, be.Handled, events.HandledKey(in.WorkspaceID, in.ActivityID), func(b []byte) bool {
		return json.Unmarshal(b, &rec) == nil
	}); err != nil {
		return toolError("message %s: the answer is not recorded yet (%v); if the relay cannot record it, the message will be shown again", in.ActivityID, err)
	}
	switch rec.Outcome {
	case events.OutcomeNoReply:
		return mcp.NewToolResultText(fmt.Sprintf("Dismissed message %s: recorded as handled, nothing is sent.", in.ActivityID))
	case events.OutcomeSuppressed:
		if in.Kind == events.KindBroadcast {
			return mcp.NewToolResultText(fmt.Sprintf("Message %s is recorded as handled, but the reply was not sent: it is a broadcast to every agent of the org, which the relay answers to no one; to answer its sender, send it a message of your own.", in.ActivityID))
		}
		return mcp.NewToolResultText(fmt.Sprintf("Message %s is recorded as handled, but the reply was not sent: the message is itself a reply or the conversation reached the hop limit (loop guard).", in.ActivityID))
	}
	to := "the canvas user (/notify)"
	if in.Source == events.SourcePeerAgent {
		to = "peer " + in.SourceWorkspaceID + " (A2A)"
	}
	return replyResult(awaitReply(ctx, be, in.WorkspaceID, in.ActivityID, handedAt),
		fmt.Sprintf("Reply to %s for message %s", to, in.ActivityID),
		fmt.Sprintf("Replied to %s for message %s; the platform accepted it.", to, in.ActivityID))
}

// replyResult says what became of a reply (what: "Reply to … for message
// …"; sent: the text once it is sent): a refusal for good is an error
// with the platform's reason and what to do, at once.
func replyResult(o replyOutcome, what, sent string) *mcp.CallToolResult {
	switch o.kind {
	case outcomeSent:
		return mcp.NewToolResultText(sent)
	case outcomeRefused:
		return toolError("%s was NOT delivered: the platform refused it for good, so the relay dead-lettered it (molecule-relay dlq list). %s", what, o.reason)
	case outcomeRetrying:
		return mcp.NewToolResultText(what + " recorded; the platform did not accept it yet (a refusal for now, or an error that leaves it unknown), and the relay retries it, posting it once.")
	}
	return mcp.NewToolResultText(what + " recorded; the relay is posting it (it retries while the platform refuses it for now, posts it once, and dead-letters it if the platform refuses it for good).")
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// waitKey waits until key's value in kv satisfies ok, watching the key
// (no polling).
func waitKey(ctx context.Context, kv jetstream.KeyValue, key string, ok func([]byte) bool) error {
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, open := <-w.Updates():
			if !open {
				return errors.New("watch ended")
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut && ok(e.Value()) {
				return nil
			}
		}
	}
}

// client returns the platform client of the watched workspace ws, or of
// the only one when ws is empty.
func (s *Server) client(ws string) (*molecule.Client, error) {
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	if ws == "" {
		if len(be.Clients) == 1 {
			for _, c := range be.Clients {
				return c, nil
			}
		}
		return nil, fmt.Errorf("workspace_id is required: watching %s", strings.Join(watched(be.Clients), ", "))
	}
	c, ok := be.Clients[ws]
	if !ok {
		return nil, fmt.Errorf("workspace %s is not watched (watching %s)", ws, strings.Join(watched(be.Clients), ", "))
	}
	return c, nil
}

func watched(clients map[string]*molecule.Client) []string {
	var ids []string
	for id := range clients {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Server) toolPeers(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.client(strings.TrimSpace(req.GetString("workspace_id", "")))
	if err != nil {
		return toolError("%v", err), nil
	}
	peers, err := c.Peers(ctx, req.GetString("q", ""))
	if err != nil {
		return toolError("list peers: %v", err), nil
	}
	return jsonResult(peers)
}

func (s *Server) toolDiscover(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, err := s.client(strings.TrimSpace(req.GetString("workspace_id", "")))
	if err != nil {
		return toolError("%v", err), nil
	}
	d, err := c.Discover(ctx, strings.TrimSpace(req.GetString("peer_id", "")))
	if err != nil {
		return toolError("discover: %v", err), nil
	}
	return jsonResult(d)
}

func jsonResult(v any) (*mcp.CallToolResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return toolError("encode: %v", err), nil
	}
	return mcp.NewToolResultText(string(b)), nil
}

// forMessage finds the waiting message a per-message tool acts for: the
// one named, or the only one waiting.
func (s *Server) forMessage(req mcp.CallToolRequest) (*pending, error) {
	id := strings.TrimSpace(req.GetString("activity_id", ""))
	if id == "" && s.cfg.Channel.Waiting() != 1 {
		return nil, fmt.Errorf("activity_id is required: %d messages are waiting", s.cfg.Channel.Waiting())
	}
	return s.cfg.Channel.find(selector{ActivityID: id})
}

// agentError explains a failed agent API call; a relay without the agent
// API says so instead of pretending.
func agentError(what string, err error) *mcp.CallToolResult {
	if errors.Is(err, handler.ErrNoAgent) {
		return toolError("%s is not available: this relay runs handlers without the agent API", what)
	}
	return toolError("%s: %v", what, err)
}

func (s *Server) toolInterim(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, err := s.forMessage(req)
	if err != nil {
		return toolError("%v", err), nil
	}
	text := req.GetString("text", "")
	if strings.TrimSpace(text) == "" {
		return toolError("text is required"), nil
	}
	if err := p.req.Interim(ctx, text); err != nil {
		return agentError(ToolInterim, err), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("Interim message posted for message %s.", p.req.Message.ActivityID)), nil
}
