package clustertest_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinaries()
	os.Exit(code)
}

// TestConfigFiles parses infra/nats with the server's own parser and checks
// the cluster is what the files claim: three uniquely named JetStream nodes
// of one cluster, each routing to the other two, each with its own store
// directory and a monitoring port, and the RELAY account with its users.
func TestConfigFiles(t *testing.T) {
	for _, kv := range clustertest.PasswordEnv() {
		k, v, _ := cut(kv)
		t.Setenv(k, v)
	}
	dir := clustertest.ConfDir(t)
	opts := map[string]*server.Options{}
	for _, name := range clustertest.NodeNames {
		o, err := server.ProcessConfigFile(filepath.Join(dir, name+".conf"))
		if err != nil {
			t.Fatalf("%s.conf: %v", name, err)
		}
		opts[name] = o
	}
	names, stores, clusterPorts := map[string]bool{}, map[string]bool{}, map[int]string{}
	for file, o := range opts {
		if o.ServerName != file {
			t.Errorf("%s.conf: server_name %q, want %q", file, o.ServerName, file)
		}
		names[o.ServerName] = true
		stores[o.StoreDir] = true
		clusterPorts[o.Cluster.Port] = o.ServerName
		if !o.JetStream {
			t.Errorf("%s: JetStream not enabled", file)
		}
		if o.HTTPPort == 0 {
			t.Errorf("%s: no monitoring port", file)
		}
		if o.Cluster.Name != "molecule" {
			t.Errorf("%s: cluster name %q", file, o.Cluster.Name)
		}
		if o.SystemAccount != "SYS" {
			t.Errorf("%s: system account %q", file, o.SystemAccount)
		}
		users := map[string]string{}
		for _, u := range o.Users {
			users[u.Username] = u.Account.Name
		}
		for _, u := range []string{clustertest.UserAdmin, clustertest.UserPoller, clustertest.UserDispatcher, clustertest.UserReplier} {
			if users[u] != "RELAY" {
				t.Errorf("%s: user %s in account %q, want RELAY", file, u, users[u])
			}
		}
		if users[clustertest.UserSys] != "SYS" {
			t.Errorf("%s: user sys in account %q, want SYS", file, users[clustertest.UserSys])
		}
	}
	if len(names) != 3 || len(stores) != 3 || len(clusterPorts) != 3 {
		t.Fatalf("names %v, store dirs %v, cluster ports %v: want 3 distinct each", names, stores, clusterPorts)
	}
	for file, o := range opts {
		var routed []string
		for _, r := range o.Routes {
			routed = append(routed, clusterPorts[port(t, r)])
		}
		slices.Sort(routed)
		var want []string
		for _, n := range clustertest.NodeNames {
			if n != file {
				want = append(want, n)
			}
		}
		if !slices.Equal(routed, want) {
			t.Errorf("%s routes to %v, want %v", file, routed, want)
		}
	}
}

func cut(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func port(t *testing.T, u *url.URL) int {
	t.Helper()
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("route %s: %v", u, err)
	}
	return p
}

// TestClusterFormsAndTopology starts the cluster from the files and creates
// the real topology with three replicas as admin.
func TestClusterFormsAndTopology(t *testing.T) {
	c := clustertest.Start(t)
	_, js := c.Connect(t, clustertest.UserAdmin)
	topo := ensureTopology(t, js)

	for _, s := range []jetstream.Stream{topo.Inbound, topo.Reply, topo.DLQ} {
		ci := s.CachedInfo()
		if ci.Config.Replicas != 3 || ci.Cluster == nil || ci.Cluster.Leader == "" || len(ci.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: replicas %d, cluster %+v", ci.Config.Name, ci.Config.Replicas, ci.Cluster)
		}
	}
	for _, kv := range []jetstream.KeyValue{topo.Cursors, topo.Status, topo.Handled, topo.Replies} {
		st, err := kv.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
			t.Errorf("bucket %s not R3", st.Bucket())
		}
	}
	// EnsureTopology is idempotent on the cluster too.
	ensureTopology(t, js)
}

// TestBucketsReadTheirWrites: on R3 buckets a Get right after a Create
// sees the Create, looked up by the stage user that relies on it. With
// direct gets (nats.go's default for key-value buckets) a follower may
// answer first and say "key not found" (nats-server#6557); CI met it once.
func TestBucketsReadTheirWrites(t *testing.T) {
	c := clustertest.Start(t)
	_, admin := c.Connect(t, clustertest.UserAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A bucket made the nats.go way (direct gets on) is converted by ensure.
	c.WaitMetaLeader(t, 30*time.Second)
	if err := backoff.Retry(func() error {
		_, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketHandled, Replicas: 3})
		return err
	}, backoff.WithContext(backoff.NewConstantBackOff(200*time.Millisecond), ctx)); err != nil {
		t.Fatal(err)
	}
	ensureTopology(t, admin)
	_, js := c.Connect(t, clustertest.UserDispatcher)
	topo, err := events.LookupTopology(ctx, js, events.TopologyConfig{Replicas: 3}, events.StageDispatcher)
	if err != nil {
		t.Fatal(err)
	}
	st, err := topo.Handled.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.AllowDirect {
		t.Error("R3 handled bucket allows direct gets")
	}
	const n = 300
	stale := 0
	for i := range n {
		key := "read-your-write-" + strconv.Itoa(i)
		if _, err := topo.Handled.Create(ctx, key, []byte("x")); err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		if _, err := topo.Handled.Get(ctx, key); err != nil {
			stale++
			t.Logf("get %s right after its create: %v", key, err)
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d reads missed the write just acknowledged", stale, n)
	}
}

func ensureTopology(t *testing.T, js jetstream.JetStream) *events.Topology {
	t.Helper()
	return ensureTopologyConfig(t, js, events.TopologyConfig{Replicas: 3})
}

func ensureTopologyConfig(t *testing.T, js jetstream.JetStream, cfg events.TopologyConfig) *events.Topology {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var topo *events.Topology
	// Right after the meta leader is elected a create may still meet
	// "JetStream system temporarily unavailable": retry briefly.
	op := func() error {
		var err error
		topo, err = events.EnsureTopology(ctx, js, cfg)
		return err
	}
	if err := backoff.Retry(op, backoff.WithContext(backoff.NewConstantBackOff(200*time.Millisecond), ctx)); err != nil {
		t.Fatalf("EnsureTopology R3: %v", err)
	}
	return topo
}

// TestStreamSurvivesNodeKill publishes to the R3 inbound stream as the
// poller, kills the stream's leader mid-run, keeps publishing, restarts the
// node, and consumes everything as the dispatcher: every message exactly
// once, none lost, none duplicated by the publisher's retries.
func TestStreamSurvivesNodeKill(t *testing.T) {
	c := clustertest.Start(t)
	_, admin := c.Connect(t, clustertest.UserAdmin)
	topo := ensureTopology(t, admin)
	_, poller := c.Connect(t, clustertest.UserPoller)
	_, dispatcher := c.Connect(t, clustertest.UserDispatcher)

	const total = 300
	start := time.Now()
	// The whole run takes ≈12 s here, loaded or not; each wait below has
	// its own budget so a stall names the step that stalled.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	acked := make(chan int, total)
	pubErr := make(chan error, 1)
	go func() {
		for i := range total {
			ws := "ws-" + strconv.Itoa(i%3)
			id := strconv.Itoa(i)
			op := func() error {
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				defer pcancel()
				_, err := poller.Publish(pctx, events.InboundSubject(ws), []byte(id),
					jetstream.WithMsgID(events.InboundMsgID(ws, id)), jetstream.WithExpectStream(events.StreamInbound))
				return err
			}
			if err := backoff.Retry(op, backoff.WithContext(backoff.NewConstantBackOff(50*time.Millisecond), ctx)); err != nil {
				pubErr <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
			acked <- i
		}
		close(acked)
	}()
	waitAcked := func(n int) {
		t.Helper()
		for range n {
			select {
			case _, ok := <-acked:
				if !ok {
					return
				}
			case err := <-pubErr:
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal("publisher stalled")
			}
		}
	}

	waitAcked(total / 3)
	info, err := topo.Inbound.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Node(info.Cluster.Leader)
	victim.Kill()
	t.Logf("%v: killed %s (stream leader) after %d publishes", time.Since(start).Round(time.Millisecond), victim.Name, total/3)
	waitAcked(total / 3)
	victim.Restart(t)
	t.Logf("%v: restarted %s", time.Since(start).Round(time.Millisecond), victim.Name)
	waitAcked(total - 2*(total/3))
	clustertest.WaitStreamCurrent(t, c, admin, events.StreamInbound, 30*time.Second)
	t.Logf("%v: stream current again after %d publishes", time.Since(start).Round(time.Millisecond), total)
	// Once failed here with the shared deadline spent: the consumer's
	// leader election after the restart is separate from the stream's.
	clustertest.WaitConsumerCurrent(t, c, admin, events.StreamInbound, events.ConsumerDispatcher, 30*time.Second)
	t.Logf("%v: consumer current", time.Since(start).Round(time.Millisecond))

	cons, err := dispatcher.Consumer(ctx, events.StreamInbound, events.ConsumerDispatcher)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < total && ctx.Err() == nil {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			seen[string(m.Data())]++
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
	// Nothing else is pending: a duplicate stored by a retried publish
	// would still be waiting here.
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumPending != 0 || ci.NumAckPending != 0 {
		extra, _ := cons.Fetch(int(ci.NumPending)+1, jetstream.FetchMaxWait(time.Second))
		for m := range extra.Messages() {
			md, _ := m.Metadata()
			t.Errorf("extra message %q (stream seq %d, msg id %s)", m.Data(), md.Sequence.Stream, m.Headers().Get(jetstream.MsgIDHeader))
		}
		t.Errorf("consumer: %d pending, %d ack pending after consuming everything", ci.NumPending, ci.NumAckPending)
	}
	var missing, dup []string
	for i := range total {
		switch n := seen[strconv.Itoa(i)]; {
		case n == 0:
			missing = append(missing, strconv.Itoa(i))
		case n > 1:
			dup = append(dup, strconv.Itoa(i))
		}
	}
	if len(missing) > 0 || len(dup) > 0 || len(seen) != total {
		t.Fatalf("consumed %d distinct of %d; missing %v; duplicated %v", len(seen), total, missing, dup)
	}
	// Acked messages leave the work-queue stream; the removal reaches the
	// stream shortly after the ack is confirmed.
	if err := pollCond(10*time.Second, func() bool {
		si, err := topo.Inbound.Info(ctx)
		return err == nil && si.State.Msgs == 0
	}); err != nil {
		si, _ := topo.Inbound.Info(ctx)
		t.Errorf("work-queue stream still holds %d messages after every ack (first seq %d, last %d)", si.State.Msgs, si.State.FirstSeq, si.State.LastSeq)
	}
}

// pollCond evaluates cond on a short tick until it holds or the timeout
// passes. Used only for server state that has no event to wait on.
func pollCond(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		<-tick.C
	}
	return nil
}
