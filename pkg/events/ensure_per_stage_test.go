package events_test

import (
	"slices"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A stage started alone ensures only the streams, consumers and buckets it
// uses (and the dead-letter stream), each on a fresh server: on a cluster
// each is a Raft group, and a stage restarted during an election waited
// for the leaders of groups it never touches. Together the three stages
// ensure everything EnsureTopology without a stage does.
func TestStageEnsuresOnlyWhatItUses(t *testing.T) {
	const (
		inbound, reply, dlq, memory = events.StreamInbound, events.StreamReply, events.StreamDLQ, events.StreamMemory
		cursors, status, handled    = "KV_molecule_cursors", "KV_molecule_poller_status", "KV_molecule_handled"
		replies, asks               = "KV_molecule_replies", "KV_molecule_asks"
	)
	for _, tt := range []struct {
		stage     string
		streams   []string
		consumers []string
	}{
		{events.StagePoller, []string{dlq, inbound, cursors, status}, []string{"dispatcher"}},
		{events.StageDispatcher, []string{dlq, inbound, memory, reply, asks, handled}, []string{"dispatcher"}},
		{events.StageReplier, []string{dlq, memory, reply, replies}, []string{"replier"}},
	} {
		t.Run(tt.stage, func(t *testing.T) {
			ctx := ctxT(t)
			s := natstest.Start(t)
			_, js := natstest.Connect(t, s.ClientURL())
			if _, err := events.EnsureTopology(ctx, js, events.TopologyConfig{}, tt.stage); err != nil {
				t.Fatalf("EnsureTopology(%s): %v", tt.stage, err)
			}
			var streams, consumers []string
			sl := js.StreamNames(ctx)
			for name := range sl.Name() {
				streams = append(streams, name)
			}
			if err := sl.Err(); err != nil {
				t.Fatal(err)
			}
			for _, st := range streams {
				str, err := js.Stream(ctx, st)
				if err != nil {
					t.Fatal(err)
				}
				cl := str.ConsumerNames(ctx)
				for c := range cl.Name() {
					consumers = append(consumers, c)
				}
				if err := cl.Err(); err != nil {
					t.Fatal(err)
				}
			}
			slices.Sort(streams)
			want := slices.Sorted(slices.Values(tt.streams))
			if !slices.Equal(streams, want) {
				t.Errorf("streams %v, want %v", streams, want)
			}
			if !slices.Equal(consumers, tt.consumers) {
				t.Errorf("consumers %v, want %v", consumers, tt.consumers)
			}
		})
	}
}
