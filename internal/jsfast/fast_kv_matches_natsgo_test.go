package jsfast_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsfast"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// sentinels are the errors the stages test KV results against.
var sentinels = map[string]error{
	"ErrKeyNotFound":         jetstream.ErrKeyNotFound,
	"ErrKeyExists":           jetstream.ErrKeyExists,
	"ErrKeyRevisionMismatch": jetstream.ErrKeyRevisionMismatch,
	"ErrKeyDeleted":          jetstream.ErrKeyDeleted,
	"ErrInvalidKey":          jetstream.ErrInvalidKey,
	"ErrNoStreamResponse":    jetstream.ErrNoStreamResponse,
	"ErrInvalidJSAck":        jetstream.ErrInvalidJSAck,
	"ErrMsgNotFound":         jetstream.ErrMsgNotFound,
	"ErrStreamNotFound":      jetstream.ErrStreamNotFound,
	"nats.ErrNoResponders":   nats.ErrNoResponders,
	"nats.ErrTimeout":        nats.ErrTimeout,
	"DeadlineExceeded":       context.DeadlineExceeded,
}

// outcome is everything a caller can see of one operation's result.
type outcome struct {
	Rev     uint64
	Value   string
	Op      jetstream.KeyValueOp
	Err     string
	Is      map[string]bool
	APICode jetstream.ErrorCode
}

func outcomeOf(rev uint64, e jetstream.KeyValueEntry, err error) outcome {
	o := outcome{Rev: rev, Is: map[string]bool{}}
	if e != nil {
		o.Rev, o.Value, o.Op = e.Revision(), string(e.Value()), e.Operation()
	}
	if err != nil {
		o.Err = err.Error()
		for name, s := range sentinels {
			if errors.Is(err, s) {
				o.Is[name] = true
			}
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			o.APICode = apiErr.ErrorCode
		}
	}
	return o
}

// kvCase is one behaviour: setup writes through nats.go (Put, Delete and
// Purge are the embedded bucket's in both), op is what is compared, and
// wantIs is the sentinel its error must match ("" for success), on a
// bucket without direct gets wantIsNoDirect where that differs.
type kvCase struct {
	name           string
	setup          func(ctx context.Context, t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue)
	op             func(ctx context.Context, kv jetstream.KeyValue) outcome
	wantIs         string
	wantIsNoDirect string
}

func put(ctx context.Context, t *testing.T, kv jetstream.KeyValue, key, value string) {
	t.Helper()
	if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

func get(key string) func(context.Context, jetstream.KeyValue) outcome {
	return func(ctx context.Context, kv jetstream.KeyValue) outcome {
		e, err := kv.Get(ctx, key)
		return outcomeOf(0, e, err)
	}
}

func create(key string) func(context.Context, jetstream.KeyValue) outcome {
	return func(ctx context.Context, kv jetstream.KeyValue) outcome {
		rev, err := kv.Create(ctx, key, []byte("created"))
		return outcomeOf(rev, nil, err)
	}
}

func update(key string, rev uint64) func(context.Context, jetstream.KeyValue) outcome {
	return func(ctx context.Context, kv jetstream.KeyValue) outcome {
		rev, err := kv.Update(ctx, key, []byte("updated"), rev)
		return outcomeOf(rev, nil, err)
	}
}

func written(ctx context.Context, t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	put(ctx, t, kv, "k", "v1")
}

func deleted(ctx context.Context, t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	put(ctx, t, kv, "k", "v1")
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

func purged(ctx context.Context, t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	put(ctx, t, kv, "other", "x") // the purge marker then is not revision 2 by chance
	put(ctx, t, kv, "k", "v1")
	if err := kv.Purge(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

func nothing(context.Context, *testing.T, jetstream.JetStream, jetstream.KeyValue) {}

func streamDeleted(ctx context.Context, t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	if err := js.DeleteStream(ctx, "KV_"+kv.Bucket()); err != nil {
		t.Fatal(err)
	}
}

var kvCases = []kvCase{
	{"get existing key", written, get("k"), "", ""},
	{"get missing key", nothing, get("k"), "ErrKeyNotFound", ""},
	{"get deleted key", deleted, get("k"), "ErrKeyNotFound", ""},
	{"get purged key", purged, get("k"), "ErrKeyNotFound", ""},
	{"get invalid key", nothing, get("a..b"), "ErrInvalidKey", ""},
	{"create new key", nothing, create("k"), "", ""},
	{"create existing key", written, create("k"), "ErrKeyExists", ""},
	{"create after delete", deleted, create("k"), "", ""},
	{"create after purge", purged, create("k"), "", ""},
	{"create invalid key", nothing, create(".k"), "ErrInvalidKey", ""},
	{"update at right revision", written, update("k", 1), "", ""},
	{"update at wrong revision", written, update("k", 7), "ErrKeyRevisionMismatch", ""},
	{"update of missing key", nothing, update("k", 1), "ErrKeyRevisionMismatch", ""},
	{"update of deleted key at its value's revision", deleted, update("k", 1), "ErrKeyRevisionMismatch", ""},
	{"update of deleted key at the marker's revision", deleted, update("k", 2), "", ""},
	{"update invalid key", nothing, update("k*", 1), "ErrInvalidKey", ""},
	{"get from deleted bucket stream", streamDeleted, get("k"), "nats.ErrNoResponders", "ErrStreamNotFound"},
	{"create in deleted bucket stream", streamDeleted, create("k"), "ErrNoStreamResponse", ""},
	{"update in deleted bucket stream", streamDeleted, update("k", 1), "ErrNoStreamResponse", ""},
}

// bucketPair makes two empty buckets alike, one bound by nats.go alone
// and one wrapped by jsfast, on streams that allow direct gets or not,
// with the given replicas (0 for one).
func bucketPair(ctx context.Context, t *testing.T, js jetstream.JetStream, prefix string, direct bool, replicas int) (natsgo, fast jetstream.KeyValue) {
	t.Helper()
	bind := func(name string) (jetstream.KeyValue, jetstream.Stream) {
		cfg := events.BucketStreamConfig(jetstream.KeyValueConfig{Bucket: name, History: 5, Storage: jetstream.MemoryStorage, Replicas: replicas})
		cfg.AllowDirect = direct
		stream, err := js.CreateStream(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return kv, stream
	}
	natsgo, _ = bind(prefix + "_natsgo")
	kv, stream := bind(prefix + "_fast")
	fast = jsfast.Wrap(js, kv, stream)
	if _, ok := fast.(*jsfast.KV); !ok {
		t.Fatalf("Wrap returned %T, not the fast bucket: the table would compare nats.go with itself", fast)
	}
	return natsgo, fast
}

// The fast bucket's Get, Create and Update answer every case as nats.go's
// do: the same revision, value and operation, the same error text, the
// same sentinels matched with errors.Is and the same API error code; on
// buckets with and without direct gets.
func TestFastKVMatchesNatsGo(t *testing.T) {
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.ClientURL())
	for _, direct := range []bool{true, false} {
		runKVCases(t, js, direct, 0)
	}
}

// The same on a three-node cluster, on replicated buckets as the relay
// makes them (no direct gets, events.BucketStreamConfig), where the
// server may refuse a wrong revision with 10164 instead of 10071.
func TestFastKVMatchesNatsGoOnReplicatedBuckets(t *testing.T) {
	c := clustertest.Start(t)
	_, js := c.Connect(t, clustertest.UserAdmin)
	runKVCases(t, js, false, 3)
}

func runKVCases(t *testing.T, js jetstream.JetStream, direct bool, replicas int) {
	for i, c := range kvCases {
		t.Run(fmt.Sprintf("direct=%v/%s", direct, c.name), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			natsgo, fast := bucketPair(ctx, t, js, fmt.Sprintf("b%d_%v", i, direct), direct, replicas)
			c.setup(ctx, t, js, natsgo)
			c.setup(ctx, t, js, fast)
			want, got := c.op(ctx, natsgo), c.op(ctx, fast)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("fast bucket differs from nats.go's:\n nats.go %+v\n fast    %+v", want, got)
			}
			t.Logf("both: %+v", got)
			wantIs := c.wantIs
			if !direct && c.wantIsNoDirect != "" {
				wantIs = c.wantIsNoDirect
			}
			if wantIs == "" && got.Err != "" || wantIs != "" && !got.Is[wantIs] {
				t.Fatalf("want error matching %q, got %+v", wantIs, got)
			}
		})
	}
}

// A request nobody answers — the server is down and the connection
// reconnecting — ends at its ctx's deadline, in both, with the same
// error: internal/stage's RetryRequest relies on it (AttemptTimeout).
func TestFastKVUnansweredRequestEndsAtDeadline(t *testing.T) {
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	natsgo, fast := bucketPair(ctx, t, js, "down", true, 0)
	s.Stop()
	const deadline = 300 * time.Millisecond
	ops := map[string]func(context.Context, jetstream.KeyValue) outcome{
		"get": get("k"), "create": create("k"), "update": update("k", 1),
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			run := func(kv jetstream.KeyValue) (outcome, time.Duration) {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				o := op(ctx, kv)
				return o, time.Since(start)
			}
			want, _ := run(natsgo)
			got, took := run(fast)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("fast bucket differs from nats.go's:\n nats.go %+v\n fast    %+v", want, got)
			}
			if !got.Is["DeadlineExceeded"] {
				t.Fatalf("want the ctx's deadline, got %+v", got)
			}
			// Not a timing check of speed: a request that outlived its
			// deadline would run into nats.go's 5 s default instead.
			if took < deadline || took > deadline+3*time.Second {
				t.Fatalf("ended after %s, want at the %s deadline", took, deadline)
			}
		})
	}
}
