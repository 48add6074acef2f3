package mcpchannel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// The TypeScript channel's nine tools are all there, under its names and
// argument names (ours kept as aliases), and each is annotated for what it
// does: the lookups read-only, nothing destructive.
func TestToolsHaveTheTypeScriptChannelsNamesAndTruthfulAnnotations(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	res, err := cl.c.ListTools(pipelinetest.Ctx(t), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	readOnly := map[string]bool{mcpchannel.ToolPeers: true, mcpchannel.ToolDiscover: true, mcpchannel.ToolInfo: true,
		mcpchannel.ToolTaskStatus: true, mcpchannel.ToolRecallMemory: true,
		mcpchannel.ToolWaitForMessage: true, mcpchannel.ToolInboxPeek: true}
	args := map[string][]string{ // the TypeScript channel's arguments
		"reply_to_workspace":   {"workspace_id", "peer_id", "text"},
		"delegate_task":        {"_as_workspace", "workspace_id", "task"},
		"delegate_task_async":  {"_as_workspace", "workspace_id", "task"},
		"check_task_status":    {"_as_workspace", "task_id"},
		"list_peers":           {"workspace_id", "q"},
		"get_workspace_info":   {"_as_workspace"},
		"send_message_to_user": {"_as_workspace", "message", "attachments"},
		"commit_memory":        {"_as_workspace", "content", "scope"},
		"recall_memory":        {"_as_workspace", "query", "scope"},
	}
	for name, want := range args {
		tl, ok := tools[name]
		if !ok {
			t.Errorf("tool %s missing", name)
			continue
		}
		for _, a := range want {
			if _, ok := tl.InputSchema.Properties[a]; !ok {
				t.Errorf("tool %s has no argument %s", name, a)
			}
		}
	}
	if _, ok := tools[mcpchannel.ToolDelegate].InputSchema.Properties["peer_id"]; !ok {
		t.Error("delegate_task lost our peer_id alias")
	}
	for name, tl := range tools {
		a := tl.Annotations
		if a.ReadOnlyHint == nil || *a.ReadOnlyHint != readOnly[name] || a.DestructiveHint == nil || *a.DestructiveHint {
			t.Errorf("tool %s: readOnly %v destructive %v, want readOnly %v and not destructive", name, deref(a.ReadOnlyHint), deref(a.DestructiveHint), readOnly[name])
		}
		if readOnly[name] && (a.IdempotentHint == nil || !*a.IdempotentHint) {
			t.Errorf("read-only tool %s is not marked idempotent", name)
		}
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// send_message_to_user posts to the canvas with no message waiting, once
// per idempotency key however often it is called (by default the same
// text within ten minutes is the same message), through the replier.
func TestSendMessageToUserPostsOncePerKey(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	for range 3 {
		if txt, isErr := cl.call(mcpchannel.ToolSendToUser, map[string]any{"message": "build is green", "idempotency_key": "k1"}); isErr {
			t.Fatalf("send: %s", txt)
		}
	}
	for range 2 {
		if txt, isErr := cl.call(mcpchannel.ToolSendToUser, map[string]any{"text": "deploying"}); isErr {
			t.Fatalf("send: %s", txt)
		}
	}
	if txt, isErr := cl.call(mcpchannel.ToolSendToUser, map[string]any{"message": "x", "attachments": []string{"/nonexistent/local.zip"}}); !isErr || !strings.Contains(txt, "/nonexistent/local.zip") {
		t.Fatalf("a missing local file was accepted: %s", txt)
	}
	pipelinetest.Eventually(t, 20*time.Second, "two canvas posts", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= 2 })
	got := map[string]int{}
	for _, n := range w.Plat.Notifications(w.Agent.ID) {
		got[n.Message]++
	}
	if len(got) != 2 || got["build is green"] != 1 || got["deploying"] != 1 {
		t.Fatalf("canvas posts %v, want each message once", got)
	}
}

// delegate_task_async returns a task id at once; the peer's answer, routed
// by the dispatcher into the task's ask record, is what check_task_status
// reports, also from a relay started after the first one closed.
func TestDelegateTaskAsyncStatusSurvivesRestart(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	w.StartPeerRelay(0, handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		return "B: " + req.Message.Text, nil
	}))
	r := startRelay(t, w)
	cl := connect(t, r)
	txt, isErr := cl.call(mcpchannel.ToolDelegateAsync, map[string]any{"workspace_id": peer.ID, "task": "what is 6 x 7?"})
	if isErr {
		t.Fatalf("delegate_task_async: %s", txt)
	}
	var started struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal([]byte(txt), &started); err != nil || started.TaskID == "" {
		t.Fatalf("no task_id in %s", txt)
	}
	status := func(cl *claude) (string, string) {
		txt, isErr := cl.call(mcpchannel.ToolTaskStatus, map[string]any{"task_id": started.TaskID})
		if isErr {
			t.Fatalf("check_task_status: %s", txt)
		}
		var st struct {
			Status string `json:"status"`
			Answer *struct {
				Text string `json:"text"`
			} `json:"answer"`
		}
		_ = json.Unmarshal([]byte(txt), &st)
		if st.Answer == nil {
			return st.Status, ""
		}
		return st.Status, st.Answer.Text
	}
	pipelinetest.Eventually(t, 30*time.Second, "the task completed", func() bool { s, _ := status(cl); return s == "completed" })
	if _, ans := status(cl); ans != "B: what is 6 x 7?" {
		t.Fatalf("answer %q", ans)
	}
	if txt, _ := cl.call(mcpchannel.ToolTaskStatus, nil); !strings.Contains(txt, started.TaskID) {
		t.Fatalf("the task is not among the recent ones: %s", txt)
	}
	// The same task again is the same task.
	if again, _ := cl.call(mcpchannel.ToolDelegateAsync, map[string]any{"peer_id": peer.ID, "task": "what is 6 x 7?"}); !strings.Contains(again, started.TaskID) {
		t.Fatalf("a repeated task got another id: %s", again)
	}

	cl.disconnect()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	next := connect(t, startRelay(t, w))
	if s, ans := status(next); s != "completed" || ans != "B: what is 6 x 7?" {
		t.Fatalf("after a restart: %s %q", s, ans)
	}
}

// delegate_task asks a peer and waits for the answer with no message
// waiting, taking the target as workspace_id (the TypeScript channel's
// name).
func TestDelegateTaskWithoutAMessageWaitsForThePeer(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	w.StartPeerRelay(0, handler.Func(func(_ context.Context, req *handler.Request) (string, error) {
		return "B: " + req.Message.Text, nil
	}))
	cl := connect(t, startRelay(t, w))
	txt, isErr := cl.call(mcpchannel.ToolDelegate, map[string]any{"workspace_id": w.Peers[0].ID, "task": "ping", "timeout_seconds": 30})
	if isErr || !strings.Contains(txt, "B: ping") {
		t.Fatalf("delegate_task: %s (error %v)", txt, isErr)
	}
}

// commit_memory and recall_memory use the platform's memory API
// (POST/GET /workspaces/:id/memories); get_workspace_info reads the
// workspace's own record.
func TestMemoryToolsUseThePlatformMemoryAPI(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	if txt, isErr := cl.call(mcpchannel.ToolCommitMemory, map[string]any{"content": "the deploy key rotates on Mondays"}); isErr || !strings.Contains(txt, "LOCAL") {
		t.Fatalf("commit_memory: %s", txt)
	}
	if txt, isErr := cl.call(mcpchannel.ToolRecallMemory, map[string]any{"query": "deploy"}); isErr || !strings.Contains(txt, "rotates on Mondays") {
		t.Fatalf("recall_memory: %s", txt)
	}
	if txt, isErr := cl.call(mcpchannel.ToolRecallMemory, map[string]any{"query": "nothing like it"}); isErr || strings.Contains(txt, "Mondays") {
		t.Fatalf("recall_memory of something else: %s", txt)
	}
	if txt, isErr := cl.call(mcpchannel.ToolCommitMemory, map[string]any{"content": "x", "scope": "EVERYWHERE"}); !isErr {
		t.Fatalf("a bad scope was accepted: %s", txt)
	}
	if txt, isErr := cl.call(mcpchannel.ToolInfo, nil); isErr || !strings.Contains(txt, w.Agent.ID) {
		t.Fatalf("get_workspace_info: %s", txt)
	}
}

// get_workspace_info of a workspace deleted on the platform says so, with
// the platform's hint, instead of a bare HTTP status.
func TestWorkspaceInfoOfDeletedWorkspaceSaysSo(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	cl := connect(t, startRelay(t, w))
	w.Plat.Delete(w.Agent.ID)
	if txt, isErr := cl.call(mcpchannel.ToolInfo, nil); !isErr || !strings.Contains(txt, "was deleted on the platform") {
		t.Fatalf("get_workspace_info of a deleted workspace: %s (error %v)", txt, isErr)
	}
}
