package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultDispatcherAckWait and DefaultReplierAckWait are the consumers'
// AckWait when TopologyConfig leaves it unset. They bound the time to
// redelivery of a message that was in flight in a killed stage (the last
// keep-alive came at most a third of it before the kill), so that a crash
// costs seconds, not the 30 s and 60 s of earlier versions; EnsureTopology
// updates a consumer created with the old values.
const (
	DefaultDispatcherAckWait = 8 * time.Second
	DefaultReplierAckWait    = 8 * time.Second
)

// TopologyConfig sizes the JetStream topology. The zero value is valid: every
// field has a default, applied by SetDefaults.
type TopologyConfig struct {
	// Replicas of every stream and bucket. If not set, 1. Use 3 on a
	// three-node cluster.
	Replicas int
	// DuplicateWindow of the inbound and reply streams. If not set, 2 hours.
	// It must exceed the poller's overlap re-read window; values under 30
	// minutes are refused.
	DuplicateWindow time.Duration
	// DispatcherAckWait is how long the dispatcher may hold a message
	// without acking or signalling progress; it is also how long a message
	// in flight in a killed dispatcher waits before it is redelivered. The
	// stage signals progress (InProgress) every third of it for as long as
	// it works on a message, however long the handler takes, so a short
	// value costs nothing but a few keep-alives. If not set,
	// DefaultDispatcherAckWait (8 seconds).
	DispatcherAckWait time.Duration
	// DispatcherMaxDeliver is how many times an inbound message is delivered
	// before it becomes a dead letter. If not set, 5.
	DispatcherMaxDeliver int
	// ReplierAckWait: as DispatcherAckWait, for the replier (a slow post,
	// a wait for the rate budget or for an earlier post's flight are all
	// kept alive the same way). If not set, DefaultReplierAckWait (8
	// seconds).
	ReplierAckWait time.Duration
	// ReplierMaxDeliver: as DispatcherMaxDeliver, for the replier. If not
	// set, 10.
	ReplierMaxDeliver int
	// MaxAckPending caps unacknowledged messages per consumer across all
	// workers. If not set, 1000.
	MaxAckPending int
	// DLQMaxAge is how long dead letters are kept. If not set, 14 days.
	DLQMaxAge time.Duration
	// RecordTTL is how long handled/replied records are kept. If not set,
	// 7 days (the platform's activity retention).
	RecordTTL time.Duration
	// HistoryTTL is how long a conversation's turns are kept after its last
	// write (the history bucket's MaxAge). If not set, 7 days.
	HistoryTTL time.Duration
	// HistoryTurns is how many messages each conversation subject of
	// StreamMemory keeps (its MaxMsgsPerSubject); a message holds one or
	// more turns, so a conversation keeps at least this many turns.
	// EnsureTopology never lowers it below what the stream already has,
	// so stages configured with different MOLECULE_HISTORY_TURNS do not
	// undo each other's update. If not set, 20.
	HistoryTurns int
	// AskTTL is how long an ask record (BucketAsks) is kept: a little
	// over the longest wait for a peer's answer, which the asker caps at
	// AskTTL less AskTTLMargin. If not set, DefaultAskTTL (1 hour).
	AskTTL time.Duration
	// Storage of streams and buckets. If not set, file storage.
	Storage jetstream.StorageType
}

// SetDefaults fills every unset field with its default.
func (c *TopologyConfig) SetDefaults() {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Hour
	}
	if c.DispatcherAckWait == 0 {
		c.DispatcherAckWait = DefaultDispatcherAckWait
	}
	if c.DispatcherMaxDeliver == 0 {
		c.DispatcherMaxDeliver = 5
	}
	if c.ReplierAckWait == 0 {
		c.ReplierAckWait = DefaultReplierAckWait
	}
	if c.ReplierMaxDeliver == 0 {
		c.ReplierMaxDeliver = 10
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 1000
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = 14 * 24 * time.Hour
	}
	if c.RecordTTL == 0 {
		c.RecordTTL = 7 * 24 * time.Hour
	}
	if c.HistoryTTL == 0 {
		c.HistoryTTL = 7 * 24 * time.Hour
	}
	if c.AskTTL == 0 {
		c.AskTTL = DefaultAskTTL
	}
	if c.HistoryTurns == 0 {
		c.HistoryTurns = DefaultHistoryTurns
	}
}

// DefaultHistoryTurns is TopologyConfig.HistoryTurns's default: the
// canvas's own history window is its last 20 messages.
const DefaultHistoryTurns = 20

// DefaultAskTTL is TopologyConfig.AskTTL's default; AskTTLMargin is how
// much longer an ask record lives than the longest wait for its answer, so
// an answer arriving at the end of a wait still finds its record.
const (
	DefaultAskTTL = time.Hour
	AskTTLMargin  = 5 * time.Minute
)

// Validate reports the first invalid field.
func (c *TopologyConfig) Validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("events: replicas must be 1..5, got %d", c.Replicas)
	case c.DuplicateWindow < 30*time.Minute:
		return fmt.Errorf("events: duplicate window must be at least 30m, got %s", c.DuplicateWindow)
	case c.DispatcherAckWait < time.Second || c.ReplierAckWait < time.Second:
		return fmt.Errorf("events: ack wait must be at least 1s")
	case c.DispatcherMaxDeliver < 1 || c.ReplierMaxDeliver < 1:
		return fmt.Errorf("events: max deliver must be >= 1")
	case c.MaxAckPending < 1:
		return fmt.Errorf("events: max ack pending must be >= 1")
	case c.HistoryTTL < time.Minute:
		return fmt.Errorf("events: history TTL must be at least 1m, got %s", c.HistoryTTL)
	case c.HistoryTurns < 1 || c.HistoryTurns > 1000:
		return fmt.Errorf("events: history turns must be 1..1000, got %d", c.HistoryTurns)
	case c.AskTTL < 2*AskTTLMargin:
		return fmt.Errorf("events: ask TTL must be at least %s, got %s", 2*AskTTLMargin, c.AskTTL)
	}
	return nil
}

// Topology holds handles to everything EnsureTopology created.
type Topology struct {
	Inbound    jetstream.Stream
	Reply      jetstream.Stream
	DLQ        jetstream.Stream
	Dispatcher jetstream.Consumer
	Replier    jetstream.Consumer
	Cursors    jetstream.KeyValue
	Status     jetstream.KeyValue
	Handled    jetstream.KeyValue
	Replies    jetstream.KeyValue
	// Memory is StreamMemory, conversation memory; nil in a
	// LookupTopology of a cluster whose admin has not created it yet.
	Memory jetstream.Stream
	// History is the key-value bucket an earlier version kept
	// conversation memory in, bound only where it exists (nothing creates
	// it any more), so that internal/memory can read it through; else nil.
	History jetstream.KeyValue
	// Asks is nil in a LookupTopology of a cluster whose admin has not
	// created it yet: delegation is then off (the dispatcher says so).
	Asks   jetstream.KeyValue
	Config TopologyConfig
}

// EnsureTopology creates or updates the streams, durable consumers and
// buckets: an existing consumer takes cfg's AckWait, MaxDeliver and
// MaxAckPending (all editable in place; its position and pending
// messages are kept). It is idempotent and safe to call from every stage at start-up,
// concurrently.
//
// With stages named (StagePoller, StageDispatcher, StageReplier) it
// ensures only what those stages write to or read from, as
// LookupTopology looks up only that, plus the dead-letter stream every
// stage writes to; without, everything. Each stream, consumer and bucket
// is a Raft group of its own on a cluster, and a lookup waits for its
// leader: a stage restarted during an election would otherwise wait for
// groups it never uses (the replier for the poller's cursors).
func EnsureTopology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig, stages ...string) (*Topology, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, s := range stages {
		want[s] = true
	}
	all := len(stages) == 0
	poller, dispatcher, replier := all || want[StagePoller], all || want[StageDispatcher], all || want[StageReplier]
	t := &Topology{Config: cfg}
	var err error
	stream := func(dst *jetstream.Stream, want jetstream.StreamConfig) {
		if err == nil {
			if *dst, err = ensureStream(ctx, js, want); err != nil {
				err = fmt.Errorf("events: create stream %s: %w", want.Name, err)
			}
		}
	}
	consumer := func(dst *jetstream.Consumer, stream string, want jetstream.ConsumerConfig) {
		if err == nil {
			if *dst, err = ensureConsumer(ctx, js, stream, want); err != nil {
				err = fmt.Errorf("events: create consumer %s: %w", want.Durable, err)
			}
		}
	}
	bucket := func(dst *jetstream.KeyValue, b jetstream.KeyValueConfig) {
		if err == nil {
			b.Replicas, b.Storage = cfg.Replicas, cfg.Storage
			*dst, err = EnsureBucket(ctx, js, b)
		}
	}
	if poller || dispatcher {
		stream(&t.Inbound, InboundStreamConfig(cfg))
	}
	if dispatcher || replier {
		stream(&t.Reply, ReplyStreamConfig(cfg)) // the dispatcher publishes to it
	}
	stream(&t.DLQ, DLQStreamConfig(cfg))
	if poller || dispatcher {
		consumer(&t.Dispatcher, StreamInbound, DispatcherConsumerConfig(cfg))
	}
	if replier {
		consumer(&t.Replier, StreamReply, ReplierConsumerConfig(cfg))
	}
	if poller {
		bucket(&t.Cursors, jetstream.KeyValueConfig{Bucket: BucketCursors, Description: "poll cursor per workspace", History: 5})
		bucket(&t.Status, jetstream.KeyValueConfig{Bucket: BucketPollerStatus, Description: "poller observations per workspace"})
	}
	if dispatcher {
		bucket(&t.Handled, jetstream.KeyValueConfig{Bucket: BucketHandled, Description: "inbound messages whose handler finished", TTL: cfg.RecordTTL})
	}
	if replier {
		bucket(&t.Replies, jetstream.KeyValueConfig{Bucket: BucketReplies, Description: "replies being or already posted", TTL: cfg.RecordTTL})
	}
	if dispatcher {
		bucket(&t.Asks, jetstream.KeyValueConfig{Bucket: BucketAsks, Description: "questions to peers and their answers", TTL: cfg.AskTTL})
	}
	if err == nil && (dispatcher || replier) {
		if t.Memory, err = ensureMemoryStream(ctx, js, cfg); err != nil {
			err = fmt.Errorf("events: create stream %s: %w", StreamMemory, err)
		}
		t.History = legacyHistory(ctx, js)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// ensureMemoryStream is ensureStream for StreamMemory, except that its
// per-conversation bound is only ever raised: stages started with
// different MOLECULE_HISTORY_TURNS would otherwise update it back and
// forth, and a lowered bound would drop turns a stage with the higher
// setting still shows.
func ensureMemoryStream(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig) (jetstream.Stream, error) {
	want := MemoryStreamConfig(cfg)
	if s, err := js.Stream(ctx, StreamMemory); err == nil && s.CachedInfo().Config.MaxMsgsPerSubject > want.MaxMsgsPerSubject {
		want.MaxMsgsPerSubject = s.CachedInfo().Config.MaxMsgsPerSubject
	}
	return ensureStream(ctx, js, want)
}

// legacyHistory binds BucketHistory where an earlier version created it,
// else nil: it is read through, never created.
func legacyHistory(ctx context.Context, js jetstream.JetStream) jetstream.KeyValue {
	kv, err := js.KeyValue(ctx, BucketHistory)
	if err != nil {
		return nil
	}
	return kv
}

// MemoryStreamConfig is the conversation memory stream's configuration.
//
// Each recorded set of turns is one message on its conversation's
// subject, so writers never contend (no read-modify-write of one key);
// MaxMsgsPerSubject bounds a conversation, MaxAge drops turns older than
// HistoryTTL, and the duplicate window (the inbound streams', capped by
// HistoryTTL, which it may not exceed) drops a redelivered or replayed
// record by its Nats-Msg-Id (MemoryMsgID).
//
// Direct gets are allowed even when replicated, unlike the buckets
// (BucketStreamConfig): a read of memory decides nothing that is written
// (appends are not compare-and-set, de-duplication is the leader's
// Nats-Msg-Id check, a seed is create-only at the leader), so a follower
// that has not yet applied the newest turn (nats-server#6557) can only
// make a handler miss a turn written a moment before, which the order of
// concurrent messages allows anyway. And only a direct get answers a
// batch: $JS.API.STREAM.MSG.GET refuses one.
func MemoryStreamConfig(cfg TopologyConfig) jetstream.StreamConfig {
	dup := cfg.DuplicateWindow
	if cfg.HistoryTTL > 0 && cfg.HistoryTTL < dup {
		dup = cfg.HistoryTTL
	}
	return jetstream.StreamConfig{
		Name:              StreamMemory,
		Description:       "conversation memory: recent turns per conversation",
		Subjects:          []string{SubjectMemoryPrefix + ".>"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           cfg.Storage,
		Replicas:          cfg.Replicas,
		MaxMsgsPerSubject: int64(cfg.HistoryTurns),
		MaxAge:            cfg.HistoryTTL,
		Duplicates:        dup,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
	}
}

// EnsureBucket creates (or brings to cfg) the key-value bucket cfg names,
// on the stream BucketStreamConfig describes, and binds it. Every bucket
// the relay writes goes through here, so none allows direct gets when
// replicated.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	_, err := ensureStream(ctx, js, BucketStreamConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("events: create bucket %s: %w", cfg.Bucket, err)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("events: bind bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// BucketStreamConfig is the stream behind a key-value bucket: what nats.go's
// CreateKeyValue would make of cfg (the fields we use), except that a
// replicated bucket does not allow direct gets.
//
// A direct get may be answered by any replica, and a follower can answer
// before it has applied a write the leader already acknowledged
// (nats-server#6557): on a three-node cluster a Create followed at once by
// a Get was seen to return "key not found". Every decision the stages make
// on a record (handled? sent? which cursor?) must see the latest write, so
// replicated buckets route Get through the stream leader
// ($JS.API.STREAM.MSG.GET). A single replica is its own leader; it keeps the
// faster direct get.
func BucketStreamConfig(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(cfg.History)
	if history < 1 {
		history = 1
	}
	replicas := cfg.Replicas
	if replicas < 1 {
		replicas = 1
	}
	dup := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	return jetstream.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        -1,
		Storage:           cfg.Storage,
		Replicas:          replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       replicas == 1,
		Discard:           jetstream.DiscardNew,
	}
}

// InboundStreamConfig is the inbound stream's configuration.
func InboundStreamConfig(cfg TopologyConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamInbound,
		Description: "inbound messages polled from the Molecule platform",
		Subjects:    []string{SubjectInboundPrefix + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
	}
}

// ReplyStreamConfig is the reply stream's configuration.
func ReplyStreamConfig(cfg TopologyConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamReply,
		Description: "handler replies waiting to be posted to the Molecule platform",
		Subjects:    []string{SubjectReplyPrefix + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
	}
}

// DLQStreamConfig is the dead-letter stream's configuration.
func DLQStreamConfig(cfg TopologyConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamDLQ,
		Description: "messages a stage gave up on, kept for inspection and replay",
		Subjects:    []string{SubjectDLQPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.DLQMaxAge,
		Duplicates:  2 * time.Minute,
	}
}

// DispatcherConsumerConfig is the dispatcher's durable pull consumer.
func DispatcherConsumerConfig(cfg TopologyConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerDispatcher,
		Description:   "dispatcher workers share this consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.DispatcherAckWait,
		MaxDeliver:    cfg.DispatcherMaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: SubjectInboundPrefix + ".>",
	}
}

// ReplierConsumerConfig is the replier's durable pull consumer.
func ReplierConsumerConfig(cfg TopologyConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerReplier,
		Description:   "repliers share this consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.ReplierAckWait,
		MaxDeliver:    cfg.ReplierMaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		FilterSubject: SubjectReplyPrefix + ".>",
	}
}

// LookupTopology finds the existing topology without creating or changing
// anything: what a stage does on a least-privilege cluster, where only an
// admin may create streams, consumers and buckets (infra/nats). It looks up
// only what the named stages (StagePoller, StageDispatcher, StageReplier)
// use — a stage's user may not even read the rest — or everything when no
// stage is named. cfg supplies the values stages read from Topology.Config.
func LookupTopology(ctx context.Context, js jetstream.JetStream, cfg TopologyConfig, stages ...string) (*Topology, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, s := range stages {
		want[s] = true
	}
	all := len(stages) == 0
	t := &Topology{Config: cfg}
	var err error
	stream := func(dst *jetstream.Stream, name string) {
		if err == nil {
			if *dst, err = js.Stream(ctx, name); err != nil {
				err = fmt.Errorf("events: look up stream %s: %w (create the topology first, as an admin: molecule-relay status)", name, err)
			}
		}
	}
	consumer := func(dst *jetstream.Consumer, s, name string) {
		if err == nil {
			if *dst, err = js.Consumer(ctx, s, name); err != nil {
				err = fmt.Errorf("events: look up consumer %s on %s: %w (create the topology first, as an admin: molecule-relay status)", name, s, err)
			}
		}
	}
	bucket := func(dst *jetstream.KeyValue, name string) {
		if err == nil {
			if *dst, err = js.KeyValue(ctx, name); err != nil {
				err = fmt.Errorf("events: look up bucket %s: %w (create the topology first, as an admin: molecule-relay status)", name, err)
			}
		}
	}
	if all || want[StagePoller] || want[StageDispatcher] {
		stream(&t.Inbound, StreamInbound)
		consumer(&t.Dispatcher, StreamInbound, ConsumerDispatcher)
	}
	if all || want[StagePoller] {
		bucket(&t.Cursors, BucketCursors)
		bucket(&t.Status, BucketPollerStatus)
	}
	if all || want[StageDispatcher] {
		bucket(&t.Handled, BucketHandled)
		// Optional: a cluster set up before delegation existed has no
		// asks bucket (or no permission for it); delegation is then off.
		if err == nil {
			if kv, kerr := js.KeyValue(ctx, BucketAsks); kerr == nil {
				t.Asks = kv
			}
		}
	}
	if all || want[StageReplier] {
		stream(&t.Reply, StreamReply)
		consumer(&t.Replier, StreamReply, ConsumerReplier)
		bucket(&t.Replies, BucketReplies)
	}
	if err == nil && (all || want[StageDispatcher] || want[StageReplier]) {
		// Optional: a cluster whose admin has not created it yet runs
		// without conversation memory, and the caller says so.
		if s, serr := js.Stream(ctx, StreamMemory); serr == nil {
			t.Memory = s
		}
		t.History = legacyHistory(ctx, js)
	}
	if all {
		stream(&t.DLQ, StreamDLQ)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// StageQueue is one stage's work queue: its work-queue stream, the
// durable consumer the stage reads it with, and the stage name its dead
// letters carry. The stage runner (internal/stage) reads it; the max-delivery
// sweep (internal/dlq) dead-letters from it.
type StageQueue struct {
	// Stage is the stage name recorded in the dead letter.
	Stage    string
	Stream   jetstream.Stream
	Consumer jetstream.Consumer
}
