package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// LoopGuard says why an answer to in must not be sent, or "": in is a
// broadcast (sent to every agent of the org, it expects no answer; one
// would go to its sender as a peer message from each of them), in is
// itself a reply (InReplyTo set, or a peer's role "agent" message) and
// replyToReplies is off, or it reached maxHops. The dispatcher drops such
// replies; the agent API refuses such peer interims (docs/protocol.md §6:
// two auto-replying agents loop forever).
func LoopGuard(in *events.Inbound, replyToReplies bool, maxHops int) string {
	switch {
	case in.Kind == events.KindBroadcast:
		return "message is a broadcast (answered by no one)"
	case in.InReplyTo != "" && !replyToReplies:
		return "message is itself a reply"
	case in.Role == "agent" && in.Source == events.SourcePeerAgent && !replyToReplies:
		return "message is a peer agent's answer (role agent)"
	case in.Hops >= maxHops:
		return "hop limit reached"
	}
	return ""
}

// withoutHopCount: a peer's message that carries none of a relay's
// metadata (a TypeScript channel agent sends role "user" and nothing
// else), so neither the hop count nor in_reply_to can stop a loop with it.
func withoutHopCount(in *events.Inbound) bool {
	return in.Source == events.SourcePeerAgent && in.Hops == 0 && in.InReplyTo == "" && in.InReplyToMessageID == ""
}

// streak is the value of an events.StreakKey: a ping-pong with a peer
// without hop count. A message of the peer created after our reply to
// the one before, and within PeerStreakGap of that reply, makes the
// streak one longer; any other message of the peer (a first one, one
// after a pause, one sent before we answered the one before: a burst is
// no loop) starts a new streak of 1.
type streak struct {
	Count int `json:"count"`
	// LastActivity is the last message counted: its redelivery is not
	// counted again, and our reply to it sets RepliedAt.
	LastActivity string `json:"last_activity"`
	// RepliedAt is when we answered LastActivity, on the platform's clock
	// (its created_at plus the time since we polled it): compared with
	// the next message's created_at, our clock's offset from the
	// platform's cancels out. Zero while it is not answered.
	RepliedAt time.Time `json:"replied_at,omitzero"`
}

// peerStreak is the loop guard for peers without hop count: the message
// that would make a peer's ping-pong longer than PeerStreak is not
// handled, so a relay and an agent that answers every message (role
// "user", no metadata) stop after PeerStreak turns, and a question the
// peer sends after a pause is answered. An answer to a question of ours
// never gets here (answers routes it first).
func (d *Dispatcher) peerStreak(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		if !d.guardsStreak(m.in) {
			return next(runCtx, m)
		}
		ctx, cancel := d.run.OpContext(runCtx)
		n, err := d.streaks.update(ctx, d.topo.Asks, m.in, func(s *streak) {
			switch {
			case s.LastActivity == m.in.ActivityID:
				return // a redelivery: counted already
			case !s.RepliedAt.IsZero() && m.in.CreatedAt.After(s.RepliedAt) && m.in.CreatedAt.Sub(s.RepliedAt) <= d.cfg.PeerStreakGap:
				s.Count++
			default:
				s.Count = 1
			}
			s.LastActivity, s.RepliedAt = m.in.ActivityID, time.Time{}
		})
		cancel()
		if err != nil {
			m.Log.WarnContext(runCtx, "dispatcher: peer streak not counted; retrying later", "error", err)
			return stage.Retry(0)
		}
		if n <= d.cfg.PeerStreak {
			return next(runCtx, m)
		}
		m.suppressed = fmt.Sprintf("turn %d of a ping-pong with a peer without hop count, each within %s of the one before (PeerStreak %d)",
			n, d.cfg.PeerStreakGap, d.cfg.PeerStreak)
		return d.complete(runCtx, m, handler.Answer{})
	}
}

// guardsStreak: in takes part in a peer streak.
func (d *Dispatcher) guardsStreak(in *events.Inbound) bool {
	return d.topo.Asks != nil && !d.cfg.ReplyToReplies && withoutHopCount(in)
}

// streakReplied notes in the streak that in is answered, before the
// reply leaves: the peer's next message then continues the streak. A
// failure is logged only: the streak then starts again (the loop guard
// is late, never wrong about a message).
func (d *Dispatcher) streakReplied(ctx context.Context, m *message) {
	if !d.guardsStreak(m.in) {
		return
	}
	at := m.in.CreatedAt.Add(time.Since(m.in.PolledAt))
	if m.in.PolledAt.IsZero() || m.in.CreatedAt.IsZero() {
		at = time.Now()
	}
	_, err := d.streaks.update(ctx, d.topo.Asks, m.in, func(s *streak) {
		if s.LastActivity == m.in.ActivityID && s.RepliedAt.IsZero() {
			s.RepliedAt = at
		}
	})
	if err != nil {
		m.Log.WarnContext(ctx, "dispatcher: peer streak not told of the reply", "error", err)
	}
}

// streaks serialises this process's updates of each streak key and
// remembers the value and revision it last read or wrote: a burst of one
// peer's messages, handled concurrently, would otherwise race on one
// compare-and-set until some of them give up and are redelivered, a
// whole delivery each. Another process's write still makes the update
// fail (wrong revision); it then reads the key again. A change that
// changes nothing (a redelivery) is decided on the value last seen.
type streaks struct {
	mu   sync.Mutex
	keys map[string]*streakKey
}

// streakKey is one key's lock and the last value seen (rev 0: none).
type streakKey struct {
	mu  sync.Mutex
	s   streak
	rev uint64
}

func (t *streaks) lock(key string) *streakKey {
	t.mu.Lock()
	if t.keys == nil {
		t.keys = map[string]*streakKey{}
	}
	k := t.keys[key]
	if k == nil {
		k = &streakKey{}
		t.keys[key] = k
	}
	t.mu.Unlock()
	k.mu.Lock()
	return k
}

// update applies change to in's sender's streak (compare-and-set)
// and returns the streak's length.
func (t *streaks) update(ctx context.Context, kv jetstream.KeyValue, in *events.Inbound, change func(*streak)) (int, error) {
	key := events.StreakKey(in.WorkspaceID, in.SourceWorkspaceID)
	k := t.lock(key)
	defer k.mu.Unlock()
	for range 5 {
		if k.rev == 0 {
			e, err := kv.Get(ctx, key)
			switch {
			case err == nil:
				// Decoded into a zero streak: a field the value omits
				// (replied_at) must not keep the remembered one.
				k.s, k.rev = streak{}, e.Revision()
				if json.Unmarshal(e.Value(), &k.s) != nil {
					k.s = streak{}
				}
			case errors.Is(err, jetstream.ErrKeyNotFound):
				k.s = streak{}
			default:
				return 0, err
			}
		}
		s := k.s
		change(&s)
		if s == k.s {
			return s.Count, nil
		}
		data, _ := json.Marshal(s)
		var rev uint64
		var err error
		if k.rev == 0 {
			rev, err = kv.Create(ctx, key, data)
		} else {
			rev, err = kv.Update(ctx, key, data, k.rev)
		}
		if err == nil {
			k.s, k.rev = s, rev
			return s.Count, nil
		}
		k.rev = 0 // read it again
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("dispatcher: peer streak %s kept changing", key)
}
