package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

// overviewView is every workspace the poller's buckets know, with what
// the serving process knows of it and the poller-group member polling it.
type overviewView struct {
	Workspaces []workspaceView `json:"workspaces"`
	// StatusRefreshSecs: the poller rewrites last poll and heartbeat
	// times this often while nothing else changes.
	StatusRefreshSecs int `json:"status_refresh_secs"`
}

type workspaceView struct {
	poller.WorkspaceStatus
	State    string         `json:"state"`
	PolledBy string         `json:"polled_by,omitempty"`
	Group    string         `json:"group,omitempty"`
	Live     *WorkspaceLive `json:"live,omitempty"`
}

func (c *Console) overview(r *http.Request) (any, error) {
	v := overviewView{Workspaces: []workspaceView{}, StatusRefreshSecs: int(poller.StatusRefresh.Seconds())}
	if c.topo.Status == nil || c.topo.Cursors == nil {
		return v, nil // a topology looked up for stages that do not poll
	}
	ws, err := poller.ReadStatus(r.Context(), c.topo)
	if err != nil {
		return nil, err
	}
	owners, err := c.groupOwners(r)
	if err != nil {
		return nil, err
	}
	live := map[string]*WorkspaceLive{}
	if c.opts.Live != nil {
		for _, l := range c.opts.Live() {
			live[l.WorkspaceID] = &l
		}
	}
	for _, w := range ws {
		o := owners[w.WorkspaceID]
		v.Workspaces = append(v.Workspaces, workspaceView{WorkspaceStatus: w, State: stateOf(w), PolledBy: o[1], Group: o[0], Live: live[w.WorkspaceID]})
	}
	return v, nil
}

func stateOf(w poller.WorkspaceStatus) string {
	switch {
	case w.Stopped != "":
		return "stopped: " + w.Stopped
	case w.Paused:
		return "paused"
	case w.LastPollError != "":
		return "error"
	case w.LastPollAt.IsZero():
		return "not polled yet"
	}
	return "ok"
}

// groupOwners maps each workspace a poller group claimed to its group
// and member, from the keys <group>.c.<workspace> (internal/pollgroup).
func (c *Console) groupOwners(r *http.Request) (map[string][2]string, error) {
	out := map[string][2]string{}
	kv, err := c.js.KeyValue(r.Context(), events.BucketPollerGroups)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(r.Context(), "*.c.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if group, ws, ok := strings.Cut(e.Key(), ".c."); ok {
			out[ws] = [2]string{group, string(e.Value())}
		}
	}
	return out, nil
}

// dlqView is a filtered list of dead letters, their bodies withheld.
type dlqView struct {
	Entries []dlq.Entry `json:"entries"`
	Total   int         `json:"total"`
}

// dlqFilter reads the list's filter: stage, workspace, reason, and q, a
// text searched in the metadata and the error (never in the bodies).
func dlqFilter(r *http.Request) (dlq.Filter, string) {
	q := r.URL.Query()
	return dlq.Filter{Stage: q.Get("stage"), WorkspaceID: q.Get("workspace"), Reason: q.Get("reason")}, strings.ToLower(q.Get("q"))
}

func (c *Console) dlqList(r *http.Request) (any, error) {
	f, search := dlqFilter(r)
	entries, err := dlq.List(r.Context(), c.js, f)
	if err != nil {
		return nil, err
	}
	v := dlqView{Entries: []dlq.Entry{}}
	for i := len(entries) - 1; i >= 0; i-- { // newest first
		e := entries[i].Redacted()
		if search != "" && !strings.Contains(strings.ToLower(searchable(e)), search) {
			continue
		}
		v.Entries = append(v.Entries, e)
	}
	v.Total = len(v.Entries)
	return v, nil
}

func searchable(e dlq.Entry) string {
	s := e.Subject + " " + strconv.FormatUint(e.Seq, 10) + " " + e.DecodeError
	if dl := e.DeadLetter; dl != nil {
		s += " " + dl.Stage + " " + dl.WorkspaceID + " " + dl.ActivityID + " " + dl.Reason + " " + dl.Error + " " + string(dl.Envelope)
	}
	return s
}

func seqOf(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, badRequest(fmt.Errorf("console: %q is not a dead letter's sequence", r.PathValue("seq")))
	}
	return seq, nil
}

func (c *Console) dlqShow(r *http.Request) (any, error) {
	_, e, err := c.dlqEntry(r)
	if err != nil {
		return nil, err
	}
	return e.Redacted(), nil
}

// dlqEntry reads the dead letter the request's path names.
func (c *Console) dlqEntry(r *http.Request) (uint64, *dlq.Entry, error) {
	seq, err := seqOf(r)
	if err != nil {
		return 0, nil, err
	}
	e, err := dlq.Get(r.Context(), c.js, seq)
	if errors.Is(err, dlq.ErrNotFound) {
		return 0, nil, httpError{http.StatusNotFound, err}
	}
	return seq, e, err
}

// dlqReveal returns the dead letter's envelope whole (the message's text
// and row), logged.
func (c *Console) dlqReveal(r *http.Request) (any, error) {
	seq, e, err := c.dlqEntry(r)
	if err != nil {
		return nil, err
	}
	c.logReveal(r, "dead letter", "seq", seq)
	if e.DeadLetter == nil {
		return map[string]string{"raw": string(e.Raw)}, nil
	}
	return map[string]json.RawMessage{"envelope": e.DeadLetter.Envelope}, nil
}

// seqsBody is the body of an action on one or many dead letters.
type seqsBody struct {
	Seqs []uint64 `json:"seqs"`
}

// outcome says, per sequence, what an action did.
type outcome struct {
	Seq   uint64 `json:"seq"`
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
}

func (c *Console) eachSeq(r *http.Request, verb string, fn func(uint64) error) (any, error) {
	var b seqsBody
	if err := decodeBody(r, &b); err != nil {
		return nil, err
	}
	if len(b.Seqs) == 0 {
		return nil, badRequest(errors.New("console: no dead letter named (seqs)"))
	}
	out := make([]outcome, 0, len(b.Seqs))
	for _, seq := range b.Seqs {
		o := outcome{Seq: seq, Done: true}
		if err := fn(seq); err != nil {
			o.Done, o.Error = false, err.Error()
		}
		c.log.InfoContext(r.Context(), "console: dead letter "+verb, "seq", seq, "done", o.Done, "error", o.Error, "remote", r.RemoteAddr)
		out = append(out, o)
	}
	return out, nil
}

func (c *Console) dlqReplay(r *http.Request) (any, error) {
	return c.eachSeq(r, "replayed", func(seq uint64) error { return dlq.Replay(r.Context(), c.js, seq) })
}

func (c *Console) dlqPurge(r *http.Request) (any, error) {
	return c.eachSeq(r, "purged", func(seq uint64) error { return dlq.Delete(r.Context(), c.js, seq) })
}

// conversationsView lists each workspace's conversations.
type conversationsView struct {
	Workspaces []workspaceConversations `json:"workspaces"`
	On         bool                     `json:"memory_stream"`
}

type workspaceConversations struct {
	WorkspaceID   string   `json:"workspace_id"`
	Conversations []string `json:"conversations"`
}

// workspaceIDs are the workspaces the poller's buckets know.
func (c *Console) workspaceIDs(r *http.Request) ([]string, error) {
	var ids []string
	if c.topo.Status == nil || c.topo.Cursors == nil {
		return ids, nil
	}
	ws, err := poller.ReadStatus(r.Context(), c.topo)
	for _, w := range ws {
		ids = append(ids, w.WorkspaceID)
	}
	return ids, err
}

func (c *Console) conversations(r *http.Request) (any, error) {
	v := conversationsView{Workspaces: []workspaceConversations{}, On: c.topo.Memory != nil}
	ids, err := c.workspaceIDs(r)
	if err != nil {
		return nil, err
	}
	if ws := r.URL.Query().Get("workspace"); ws != "" {
		ids = []string{ws}
	}
	for _, ws := range ids {
		convs, err := memory.Conversations(r.Context(), c.js, c.topo, ws)
		if err != nil {
			return nil, err
		}
		if convs == nil {
			convs = []string{}
		}
		v.Workspaces = append(v.Workspaces, workspaceConversations{WorkspaceID: ws, Conversations: convs})
	}
	return v, nil
}

// turnView is a turn without its text.
type turnView struct {
	Role       string    `json:"role"`
	ActivityID string    `json:"activity_id,omitempty"`
	At         time.Time `json:"at,omitzero"`
	Chars      int       `json:"chars"`
	Files      int       `json:"files"`
}

func (c *Console) conversation(r *http.Request) (any, error) {
	ws, conv := r.PathValue("workspace"), r.PathValue("conversation")
	turns, _, err := memory.Read(r.Context(), c.js, c.topo, ws, conv)
	if err != nil {
		return nil, err
	}
	out := make([]turnView, 0, len(turns))
	for _, t := range turns {
		out = append(out, turnView{Role: t.Role, ActivityID: t.ActivityID, At: t.At, Chars: len([]rune(t.Text)), Files: len(t.Attachments)})
	}
	return map[string]any{"workspace_id": ws, "conversation": conv, "turns": out}, nil
}

func (c *Console) revealConversation(r *http.Request) (any, error) {
	ws, conv := r.PathValue("workspace"), r.PathValue("conversation")
	turns, _, err := memory.Read(r.Context(), c.js, c.topo, ws, conv)
	if err != nil {
		return nil, err
	}
	c.logReveal(r, "conversation", "workspace", ws, "conversation", conv)
	return map[string]any{"turns": turns}, nil
}

type forgetBody struct {
	WorkspaceID  string `json:"workspace_id"`
	Conversation string `json:"conversation"`
}

func (c *Console) forget(r *http.Request) (any, error) {
	var b forgetBody
	if err := decodeBody(r, &b); err != nil {
		return nil, err
	}
	if b.WorkspaceID == "" || b.Conversation == "" {
		return nil, badRequest(errors.New("console: forget needs workspace_id and conversation"))
	}
	done, err := memory.Forget(r.Context(), c.js, c.topo, b.WorkspaceID, b.Conversation)
	c.log.InfoContext(r.Context(), "console: conversation forgotten", "workspace", b.WorkspaceID, "conversation", b.Conversation, "erased", len(done), "remote", r.RemoteAddr)
	if err != nil {
		return nil, err
	}
	return map[string]any{"forgotten": done}, nil
}

// delegationView is a question a handler asked a peer and waits for,
// without its text.
type delegationView struct {
	Workspace string    `json:"workspace"`
	Peer      string    `json:"peer"`
	Activity  string    `json:"activity"`
	MessageID string    `json:"message_id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	SentAt    time.Time `json:"sent_at,omitzero"`
	Deadline  time.Time `json:"deadline"`
}

func (c *Console) delegations(r *http.Request) (any, error) {
	out := []delegationView{}
	kv, err := c.js.KeyValue(r.Context(), events.BucketAsks)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	err = eachEntry(r, kv, "*.ask.*", func(e jetstream.KeyValueEntry) {
		var rec events.AskRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.State != events.AskAnswered {
			out = append(out, delegationView{Workspace: rec.Workspace, Peer: rec.Peer, Activity: rec.Activity, MessageID: rec.MessageID,
				State: rec.State, CreatedAt: rec.CreatedAt, SentAt: rec.SentAt, Deadline: rec.Deadline})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// eachEntry calls fn with every live entry of kv matching filter.
func eachEntry(r *http.Request, kv jetstream.KeyValue, filter string, fn func(jetstream.KeyValueEntry)) error {
	w, err := kv.Watch(r.Context(), filter, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			return nil
		}
		fn(e)
	}
	return r.Context().Err()
}

// mcpSession is one molecule-relay mcp instance on one workspace: the
// one holding its channel (the lease) or one waiting for it
// (kvlease.MarkWaiting).
type mcpSession struct {
	WorkspaceID string `json:"workspace_id"`
	Instance    string `json:"instance"`
	// Role is "holds" or "waits".
	Role    string    `json:"role"`
	PID     int       `json:"pid,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Expires time.Time `json:"expires"`
	Live    bool      `json:"live"`
}

// mcpSessions lists the holders, each followed by its waiters; a waiting
// entry that expired (its session died) is left out.
func (c *Console) mcpSessions(r *http.Request) (any, error) {
	out := []mcpSession{}
	kv, err := c.js.KeyValue(r.Context(), events.BucketMCPLeases)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	err = eachEntry(r, kv, ">", func(e jetstream.KeyValueEntry) {
		var v kvlease.Waiting // a lease's value is its first and last fields
		if json.Unmarshal(e.Value(), &v) != nil {
			return
		}
		s := mcpSession{WorkspaceID: e.Key(), Instance: v.Instance, Role: "holds", Expires: v.Expires, Live: now.Before(v.Expires)}
		if ws, _, ok := kvlease.ParseWaitingKey(e.Key()); ok {
			if !s.Live {
				return
			}
			s.WorkspaceID, s.Role, s.PID, s.Since = ws, "waits", v.PID, v.Since
		}
		out = append(out, s)
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].WorkspaceID != out[j].WorkspaceID {
			return out[i].WorkspaceID < out[j].WorkspaceID
		}
		return out[i].Role == "holds" && out[j].Role != "holds"
	})
	return out, err
}
