package mcpchannel

// The pull tools: how an MCP client that ignores notifications/claude/channel
// (Codex CLI, Cursor, Gemini CLI, Claude Code without the channels flag)
// receives its messages. They read the same waiting messages the channel
// shows: a message the dispatcher handed to the Channel, kept alive by the
// stage until reply_to_workspace, dismiss or inbox_pop settles it, and
// handed back to JetStream when the session ends. So a pulled message is
// answered once, through the handled record, exactly as a pushed one.
//
// Names and argument shapes are the platform's universal MCP server's
// (EnterOS-AI/enteros-core eaf7dbb, workspace/a2a_tools_inbox.py and
// workspace/platform_tools/registry.py:378-508; molecule-core PR #2415):
// wait_for_message(timeout_secs, default 60, capped at 300) returns the head
// message without taking it, or {"timeout": true}; inbox_peek(limit,
// default 10); inbox_pop(activity_id), idempotent, {"removed": bool}.

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The pull tools' names: the platform's universal MCP server's.
const (
	ToolWaitForMessage = "wait_for_message"
	ToolInboxPeek      = "inbox_peek"
	ToolInboxPop       = "inbox_pop"
)

const (
	// pullWaitDefault and pullWaitMax: the platform's (a2a_tools_inbox.py
	// tool_wait_for_message): a client tool call rarely outlives 5 minutes.
	pullWaitDefault = 60 * time.Second
	pullWaitMax     = 300 * time.Second
	peekDefault     = 10
)

// signalArrival wakes every wait_for_message; called with c.mu held.
func (c *Channel) signalArrival() {
	if c.arrived != nil {
		close(c.arrived)
		c.arrived = nil
	}
}

// unanswered returns the messages waiting for an answer, oldest first,
// and a channel closed when another one starts waiting.
func (c *Channel) unanswered() ([]*pending, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []*pending
	for _, p := range c.pending {
		if !p.answered {
			all = append(all, p)
		}
	}
	// Oldest by the platform's time: the dispatcher hands several at once,
	// in no particular order.
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].req.Message.CreatedAt, all[j].req.Message.CreatedAt
		if !a.Equal(b) {
			return a.Before(b)
		}
		return all[i].seq < all[j].seq
	})
	if c.arrived == nil {
		c.arrived = make(chan struct{})
	}
	return all, c.arrived
}

// next waits up to d for a message waiting for an answer and returns the
// oldest, with how many wait in all; nil when none came in time.
func (c *Channel) next(ctx context.Context, d time.Duration) (*pending, int, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		all, arrived := c.unanswered()
		if len(all) > 0 {
			return all[0], len(all), nil
		}
		select {
		case <-arrived:
		case <-timer.C:
			return nil, 0, nil
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func (s *Server) addPullTools(add func(mcp.Tool, server.ToolHandlerFunc)) {
	add(tool(ToolWaitForMessage, with(hints(true, false, true),
		mcp.WithDescription("For clients that do not show channel events: wait for the next Molecule message (a canvas user's or a peer agent's) and return it, "+
			"or {\"timeout\": true} when none came within timeout_secs. The loop: wait_for_message, answer with reply_to_workspace "+
			"(pass the returned activity_id, peer_id and workspace_id), repeat. The message is not taken: until it is answered "+
			"(reply_to_workspace), dismissed (dismiss) or dropped (inbox_pop), every call returns it again, in this session and the next."),
		mcp.WithNumber("timeout_secs", mcp.Description("max seconds to wait (default 60, at most 300)")),
	)...), s.toolWaitForMessage)
	add(tool(ToolInboxPeek, with(hints(true, false, true),
		mcp.WithDescription("List the Molecule messages waiting for an answer in this session, oldest first, without taking them."),
		mcp.WithNumber("limit", mcp.Description("at most this many (default 10)")),
	)...), s.toolInboxPeek)
	add(tool(ToolInboxPop, with(hints(false, false, true),
		mcp.WithDescription("Drop a Molecule message without replying: it is recorded as handled and never shown again (as dismiss). "+
			"After reply_to_workspace there is nothing to pop: the reply already settled it, and inbox_pop says removed=false."),
		mcp.WithString("activity_id", mcp.Required(), mcp.Description("activity_id of the message (from wait_for_message or inbox_peek)")),
	)...), s.toolInboxPop)
}

// pulled is a waiting message as the pull tools return it: the channel
// event's meta keys (so the reply call is the same), the platform's poll
// keys (text, created_at, arrival_workspace_id), and the event's content.
func (s *Server) pulled(ctx context.Context, p *pending) map[string]string {
	in := s.cfg.Channel.names.enrich(ctx, p.req.Message)
	n := NewNotificationWithFiles(in, p.req.Files)
	m := make(map[string]string, len(n.Meta)+4)
	for k, v := range n.Meta {
		m[k] = v
	}
	m["text"] = in.Text
	m["created_at"] = n.Meta["ts"]
	m["arrival_workspace_id"] = in.WorkspaceID
	m["content"] = n.Content
	return m
}

func (s *Server) toolWaitForMessage(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	d := pullWaitDefault
	if secs := req.GetFloat("timeout_secs", -1); secs >= 0 {
		d = min(time.Duration(secs*float64(time.Second)), pullWaitMax)
	}
	p, waiting, err := s.cfg.Channel.next(ctx, d)
	if err != nil {
		return toolError("%s: %v", ToolWaitForMessage, err), nil
	}
	if p == nil {
		return jsonResult(map[string]any{"timeout": true, "timeout_secs": d.Seconds()})
	}
	m := s.pulled(ctx, p)
	s.log.Debug("mcp: message pulled", "activity_id", p.req.Message.ActivityID, "waiting", waiting)
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out["waiting"] = waiting
	return jsonResult(out)
}

func (s *Server) toolInboxPeek(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	limit := req.GetInt("limit", peekDefault)
	if limit <= 0 {
		limit = peekDefault
	}
	all, _ := s.cfg.Channel.unanswered()
	msgs := []map[string]string{}
	for _, p := range all[:min(limit, len(all))] {
		msgs = append(msgs, s.pulled(ctx, p))
	}
	return jsonResult(msgs)
}

// toolInboxPop settles a waiting message without a reply: the platform's
// pop drops a handled message from its in-memory queue; ours is the
// queue's settlement, so a pop of a message not yet answered is a dismiss
// (recorded as handled, logged), and a pop after the reply finds nothing
// to remove, as the platform's pop of a missing id does.
func (s *Server) toolInboxPop(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := strings.TrimSpace(req.GetString("activity_id", ""))
	if id == "" {
		return toolError("activity_id is required"), nil
	}
	p, err := s.cfg.Channel.find(selector{ActivityID: id})
	if err != nil {
		handled, herr := s.handledAnywhere(ctx, id)
		if herr != nil {
			return toolError("%s: message %s is not waiting in this session, and its handled record could not be read: %v", ToolInboxPop, id, herr), nil
		}
		why := "it is not waiting in this session (not shown yet, or handed back)"
		if handled {
			why = "it is already handled (answered, dismissed or popped)"
		}
		return jsonResult(map[string]any{"removed": false, "activity_id": id, "handled": handled, "reason": why})
	}
	in := p.req.Message
	s.log.Info("mcp: inbox_pop settles a message without a reply", "activity_id", id, "workspace", in.WorkspaceID, "source", in.Source)
	if res := s.answer(ctx, p, handler.Answer{NoReply: true}); res.IsError {
		return res, nil
	}
	return jsonResult(map[string]any{"removed": true, "activity_id": id, "handled": true,
		"reason": "recorded as handled without a reply; nothing is sent and it is not shown again"})
}

// handledAnywhere reports whether any watched workspace has a handled
// record for activity id.
func (s *Server) handledAnywhere(ctx context.Context, id string) (bool, error) {
	be, err := s.backend()
	if err != nil {
		return false, err
	}
	for ws := range be.Clients {
		_, err := be.Handled.Get(ctx, events.HandledKey(ws, id))
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return false, err
		}
	}
	return false, nil
}
