package console

import (
	"context"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// historyPerStream is how many of the last messages of each stream the
// flow reads back when a page opens; historyTimeout bounds the read.
const (
	historyPerStream = 200
	historyTimeout   = 3 * time.Second
)

// historyStreams hold what the flow's subscriptions watch: the handled
// and reply records (kept for their TTL), the dead letters, and the
// inbound messages and replies still waiting (work queues: a handled
// message is gone from them, its record stays).
var historyStreams = []string{
	"KV_" + events.BucketHandled, "KV_" + events.BucketReplies,
	events.StreamDLQ, events.StreamInbound, events.StreamReply,
}

// readHistory applies the last messages of historyStreams to the flow, in
// the order they were stored and timed by when they were: the flow then
// shows what happened before a page opened, not only what arrives while
// one watches. Steps it already holds are not added twice (Message.step).
// f.mu is held.
func (f *flow) readHistory() {
	ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
	defer cancel()
	var all []*jetstream.RawStreamMsg
	for _, name := range historyStreams {
		all = append(all, f.lastOf(ctx, name)...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	for _, m := range all {
		f.apply(&nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}, m.Time)
	}
}

// lastOf returns up to historyPerStream of the last messages of stream
// name, oldest first; none when it does not exist (stages not run here).
func (f *flow) lastOf(ctx context.Context, name string) []*jetstream.RawStreamMsg {
	s, err := f.js.Stream(ctx, name)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return nil
	}
	var out []*jetstream.RawStreamMsg
	// A bucket's overwritten records leave gaps: a few tries per message
	// kept, not a walk over every gap.
	tries := 4 * historyPerStream
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0 && len(out) < historyPerStream && tries > 0 && ctx.Err() == nil; seq-- {
		tries--
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted: a record overwritten, a message acked
		}
		out = append(out, m)
	}
	if ctx.Err() != nil {
		f.log.Debug("console: the flow's history was cut short", "stream", name, "read", len(out))
	}
	return out
}
