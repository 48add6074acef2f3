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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Tool names.
const (
	ToolReply    = "reply_to_workspace"
	ToolDismiss  = "dismiss"
	ToolPeers    = "list_peers"
	ToolDiscover = "discover_peer"
	ToolDelegate = "delegate_task"
	ToolInterim  = "send_interim"
)

// postWait bounds how long an answer tool waits, after the answer was
// recorded, for the replier to post it before saying it is on its way.
const postWait = 15 * time.Second

func (s *Server) addTools() {
	activity := mcp.WithString("activity_id", mcp.Description("meta.activity_id of the message this is about"))
	s.mcp.AddTool(mcp.NewTool(ToolReply,
		mcp.WithDescription("Answer a Molecule message shown as a channel event. Pass its activity_id (meta.activity_id). "+
			"Without activity_id the oldest waiting message of that sender is answered: the peer peer_id, or the canvas user when peer_id is empty. "+
			"The reply goes to /notify for a canvas user and to the peer over A2A, exactly once."),
		mcp.WithString("text", mcp.Required(), mcp.Description("reply text (plain text or markdown)")),
		activity,
		mcp.WithString("peer_id", mcp.Description("meta.peer_id for a peer_agent message; empty for a canvas_user message")),
		mcp.WithString("workspace_id", mcp.Description("meta.workspace_id: the watched workspace that received the message")),
	), s.toolReply)
	s.mcp.AddTool(mcp.NewTool(ToolDismiss,
		mcp.WithDescription("Mark a Molecule message handled without replying. Until it is answered or dismissed it stays waiting and is shown again in the next session."),
		mcp.WithString("activity_id", mcp.Required(), mcp.Description("meta.activity_id of the message")),
	), s.toolDismiss)
	s.mcp.AddTool(mcp.NewTool(ToolPeers,
		mcp.WithDescription("List the peer workspaces a watched workspace may talk to (id, name, role, status)."),
		mcp.WithString("workspace_id", mcp.Description("watched workspace (omit when only one is watched)")),
		mcp.WithString("q", mcp.Description("case-insensitive filter on name or role")),
	), s.toolPeers)
	s.mcp.AddTool(mcp.NewTool(ToolDiscover,
		mcp.WithDescription("Resolve one workspace by id (name and URL), as seen from a watched workspace."),
		mcp.WithString("peer_id", mcp.Required(), mcp.Description("workspace id to resolve")),
		mcp.WithString("workspace_id", mcp.Description("watched workspace (omit when only one is watched)")),
	), s.toolDiscover)
	s.mcp.AddTool(mcp.NewTool(ToolDelegate,
		mcp.WithDescription("While answering a message: ask a peer workspace and wait for its answer (the relay waits even when the peer answers later through its own poll loop)."),
		mcp.WithString("peer_id", mcp.Required(), mcp.Description("peer workspace id (from list_peers)")),
		mcp.WithString("task", mcp.Required(), mcp.Description("what to ask the peer")),
		activity,
		mcp.WithNumber("timeout_seconds", mcp.Description("how long to wait for the answer (default: the relay's)")),
	), s.toolDelegate)
	s.mcp.AddTool(mcp.NewTool(ToolInterim,
		mcp.WithDescription("While answering a message: post an interim message (\"working on it…\") to its sender now, before the final reply."),
		mcp.WithString("text", mcp.Required(), mcp.Description("interim text")),
		activity,
	), s.toolInterim)
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
	if err != nil {
		return toolError("%v", err), nil
	}
	return s.answer(ctx, p, handler.Answer{Text: text}), nil
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
		return mcp.NewToolResultText(fmt.Sprintf("Message %s is recorded as handled, but the reply was not sent: the message is itself a reply or the conversation reached the hop limit (loop guard).", in.ActivityID))
	}
	to := "the canvas user (/notify)"
	if in.Source == events.SourcePeerAgent {
		to = "peer " + in.SourceWorkspaceID + " (A2A)"
	}
	pctx, pcancel := context.WithTimeout(ctx, postWait)
	defer pcancel()
	err = waitKey(pctx, be.Replies, events.ReplyKey(in.WorkspaceID, in.ActivityID), func(b []byte) bool {
		var r events.ReplyRecord
		return json.Unmarshal(b, &r) == nil && r.State == events.StateSent
	})
	if err != nil {
		return mcp.NewToolResultText(fmt.Sprintf("Reply to %s for message %s recorded; the relay is posting it (it retries until the platform accepts it, and posts it once).", to, in.ActivityID))
	}
	return mcp.NewToolResultText(fmt.Sprintf("Replied to %s for message %s; the platform accepted it.", to, in.ActivityID))
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

func (s *Server) toolDelegate(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, err := s.forMessage(req)
	if err != nil {
		return toolError("%v", err), nil
	}
	q := handler.Question{
		PeerID:  strings.TrimSpace(req.GetString("peer_id", "")),
		Text:    req.GetString("task", ""),
		Timeout: time.Duration(req.GetFloat("timeout_seconds", 0) * float64(time.Second)),
	}
	if q.PeerID == "" || strings.TrimSpace(q.Text) == "" {
		return toolError("peer_id and task are required"), nil
	}
	ans, err := p.req.AskPeer(ctx, q)
	if err != nil {
		return agentError(ToolDelegate, err), nil
	}
	return jsonResult(ans)
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
