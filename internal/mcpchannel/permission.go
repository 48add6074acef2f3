package mcpchannel

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The permission relay of Claude Code's channel contract (channels
// reference, "Relay permission prompts"; Claude Code 2.1.81+): a server
// that declares CapabilityPermission receives each tool-approval prompt as
// MethodPermissionRequest, shows it to its trusted sender, and sends the
// sender's verdict back as MethodPermission. Here the trusted sender is the
// canvas user of a watched workspace (the platform authenticates them;
// a peer agent can never answer a prompt).
const (
	CapabilityPermission    = "claude/channel/permission"
	MethodPermissionRequest = "notifications/claude/channel/permission_request"
	MethodPermission        = "notifications/claude/channel/permission"
)

// PermissionRequest is the params of MethodPermissionRequest.
type PermissionRequest struct {
	// RequestID is five lowercase letters (a–z without l).
	RequestID    string `json:"request_id"`
	ToolName     string `json:"tool_name"`
	Description  string `json:"description"`
	InputPreview string `json:"input_preview"`
}

// permissionReply is a canvas user's verdict: "yes abcde" or "no abcde"
// (y/n too, any case), and nothing else in the message.
var permissionReply = regexp.MustCompile(`(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$`)

// prompt is the canvas text of a permission request.
func (p PermissionRequest) prompt() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Claude Code asks to use %s", Sanitize(p.ToolName))
	if d := strings.TrimSpace(p.Description); d != "" {
		fmt.Fprintf(&b, ": %s", d)
	}
	if in := strings.TrimSpace(p.InputPreview); in != "" {
		fmt.Fprintf(&b, "\n\n%s", in)
	}
	fmt.Fprintf(&b, "\n\nReply \"yes %s\" to allow or \"no %s\" to deny.", p.RequestID, p.RequestID)
	return b.String()
}

// addPermission remembers an open prompt of the connected client.
func (c *Channel) addPermission(p PermissionRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perms == nil {
		c.perms = map[string]PermissionRequest{}
	}
	c.perms[strings.ToLower(p.RequestID)] = p
}

// verdict answers in when it is a canvas user's reply to an open prompt:
// it sends the verdict to the client and returns the confirmation to post.
// ok is false for any other message, which is shown as usual.
func (c *Channel) verdict(ctx context.Context, in *events.Inbound) (a handler.Answer, ok bool, err error) {
	if in.Source != events.SourceCanvasUser {
		return a, false, nil
	}
	m := permissionReply.FindStringSubmatch(in.Text)
	if m == nil {
		return a, false, nil
	}
	id := strings.ToLower(m[2])
	c.mu.Lock()
	p, open := c.perms[id]
	cl := c.client
	if open && cl != nil {
		delete(c.perms, id)
	}
	c.mu.Unlock()
	if !open || cl == nil {
		return a, false, nil
	}
	behavior, word := "allow", "Allowed"
	if strings.HasPrefix(strings.ToLower(m[1]), "n") {
		behavior, word = "deny", "Denied"
	}
	if err := cl.permission(ctx, id, behavior); err != nil {
		c.addPermission(p) // not delivered: the prompt is still open
		return a, true, fmt.Errorf("%w: verdict not sent: %v", ErrClientGone, err)
	}
	c.log.Info("mcp: permission verdict relayed", "request_id", id, "tool", p.ToolName, "behavior", behavior)
	return handler.Answer{Text: fmt.Sprintf("%s: %s (%s).", word, Sanitize(p.ToolName), id)}, true, nil
}

// permissionRequest handles the client's MethodPermissionRequest: the
// prompt is posted to the canvas of every watched workspace (once per
// request, through the replier) and remembered until a verdict.
func (s *Server) permissionRequest(ctx context.Context, line []byte) {
	var n struct {
		Params PermissionRequest `json:"params"`
	}
	if err := json.Unmarshal(line, &n); err != nil || len(n.Params.RequestID) != 5 {
		s.log.Warn("mcp: unreadable permission request", "error", err)
		return
	}
	p := n.Params
	be, err := s.backend()
	if err != nil {
		s.log.Info("mcp: permission request not relayed: this session does not have the channel", "request_id", p.RequestID)
		return
	}
	s.cfg.Channel.addPermission(p)
	for _, ws := range watched(be.Clients) {
		go func() {
			if _, err := s.postToUser(context.WithoutCancel(ctx), be, ws, p.prompt(), nil, permissionKey(p.RequestID)); err != nil {
				s.log.Warn("mcp: permission prompt not posted", "workspace", ws, "request_id", p.RequestID, "error", err)
			}
		}()
	}
}

// permissionKey makes a prompt's canvas post once: request ids are five
// random letters, unique within a session, so the hour is part of the key.
func permissionKey(id string) string {
	return "permission:" + id + ":" + time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)
}

// permissionNote is the JSON-RPC notification of a verdict.
func permissionNote(requestID, behavior string) any {
	return struct {
		JSONRPC string            `json:"jsonrpc"`
		Method  string            `json:"method"`
		Params  map[string]string `json:"params"`
	}{mcp.JSONRPC_VERSION, MethodPermission, map[string]string{"request_id": requestID, "behavior": behavior}}
}
