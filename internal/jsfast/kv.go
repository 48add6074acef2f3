package jsfast

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KV is a jetstream.KeyValue whose Get, Create and Update are plain
// requests on the connection (package doc); every other method is the
// embedded bucket's.
type KV struct {
	jetstream.KeyValue
	nc             *nats.Conn
	stream         jetstream.Stream // the bucket's stream, for a non-direct read
	defaultTimeout time.Duration
	name           string
	keyPrefix      string // "$KV.<bucket>."
	directPrefix   string // "$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>."; "" when the bucket does not allow direct gets
}

// Wrap returns kv with the fast Get, Create and Update, or kv itself
// where those would differ from nats.go's: a JetStream with its own API
// prefix, domain or client trace, or a bucket that mirrors another.
// stream is the bucket's stream as bound (its cached info decides, as
// nats.go's bound bucket does, whether Get may be a direct get).
func Wrap(js jetstream.JetStream, kv jetstream.KeyValue, stream jetstream.Stream) jetstream.KeyValue {
	opts := js.Options()
	info := stream.CachedInfo()
	if opts.APIPrefix != "" || opts.Domain != "" || opts.ClientTrace != nil || info == nil || info.Config.Mirror != nil {
		return kv
	}
	name := kv.Bucket()
	f := &KV{
		KeyValue:       kv,
		nc:             js.Conn(),
		stream:         stream,
		defaultTimeout: opts.DefaultTimeout,
		name:           name,
		keyPrefix:      "$KV." + name + ".",
	}
	if info.Config.AllowDirect {
		f.directPrefix = jetstream.DefaultAPIPrefix + "DIRECT.GET." + info.Config.Name + "." + f.keyPrefix
	}
	return f
}

// Get returns the key's latest value; a deleted or purged key, like a
// missing one, is jetstream.ErrKeyNotFound (as nats.go's Get).
func (f *KV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.directPrefix == "" {
		return f.KeyValue.Get(ctx, key) // one request through the stream leader either way
	}
	e, err := f.last(ctx, key)
	if errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Create writes the key only if it has no value: a publish expecting
// the subject's last sequence 0 or, when the key was deleted or purged,
// the delete marker's revision — nats.go's Create, step for step, so a
// key the replier forgot can be created again. A key that exists is an
// error matching jetstream.ErrKeyExists. Options (a per-key TTL) are
// nats.go's.
func (f *KV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if len(opts) > 0 {
		return f.KeyValue.Create(ctx, key, value, opts...)
	}
	rev, err := f.put(ctx, key, value, 0)
	if err == nil {
		return rev, nil
	}
	if e, gerr := f.last(ctx, key); errors.Is(gerr, jetstream.ErrKeyDeleted) {
		return f.put(ctx, key, value, e.Revision())
	}
	if isWrongLastSeq(err) {
		// As nats.go: 10071 matches ErrKeyExists by its code and keeps its
		// own message; 10164 (replicated streams) wraps it explicitly.
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("%w: %s", err, "key exists")
		}
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyExists)
	}
	return 0, err
}

// Update writes the key only if its latest revision is revision; another
// revision is an error matching jetstream.ErrKeyRevisionMismatch (and
// the server's *jetstream.APIError), as nats.go's Update.
func (f *KV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := f.put(ctx, key, value, revision)
	if err != nil && isWrongLastSeq(err) {
		return rev, fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return rev, err
}

// put publishes value to the key expecting the subject's last sequence
// to be revision (nats.go's updateRevision without a TTL).
func (f *KV) put(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if !validKey(key) {
		return 0, jetstream.ErrInvalidKey
	}
	m := &nats.Msg{
		Subject: f.keyPrefix + key,
		Data:    value,
		// Written canonical already: Header.Set would canonicalise it again.
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(revision, 10)}},
	}
	ack, err := publishMsg(ctx, f.nc, f.defaultTimeout, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// isWrongLastSeq is nats.go's isWrongLastSeqErr: the server refused an
// expected last subject sequence (10164 on replicated streams).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// entry is a jetstream.KeyValueEntry read by last.
type entry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *entry) Bucket() string                  { return e.bucket }
func (e *entry) Key() string                     { return e.key }
func (e *entry) Value() []byte                   { return e.value }
func (e *entry) Revision() uint64                { return e.revision }
func (e *entry) Created() time.Time              { return e.created }
func (e *entry) Delta() uint64                   { return 0 }
func (e *entry) Operation() jetstream.KeyValueOp { return e.op }

// last reads the key's latest message, as nats.go's internal get: a
// missing key is ErrKeyNotFound, a delete or purge marker is its entry
// with ErrKeyDeleted. A bucket without direct gets reads through the
// stream leader as nats.go does (Create's read of a deleted key needs
// the marker's revision, which the public Get does not return).
func (f *KV) last(ctx context.Context, key string) (*entry, error) {
	if !validKey(key) {
		return nil, jetstream.ErrInvalidKey
	}
	var (
		m   jetstream.RawStreamMsg // a value: the direct get's stays off the heap
		err error
	)
	if f.directPrefix != "" {
		m, err = f.directGet(ctx, key)
	} else {
		var p *jetstream.RawStreamMsg
		if p, err = f.stream.GetLastMsgForSubject(ctx, f.keyPrefix+key); p != nil {
			m = *p
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	e := &entry{bucket: f.name, key: key, value: m.Data, revision: m.Sequence, created: m.Time, op: operation(m.Header)}
	if e.op != jetstream.KeyValuePut {
		return e, jetstream.ErrKeyDeleted
	}
	return e, nil
}

// operation is what a key's message marks, as nats.go reads it: its
// KV-Operation header or, on a marker the server wrote itself (a TTL or
// a purge), its Nats-Marker-Reason.
func operation(h nats.Header) jetstream.KeyValueOp {
	if len(h) == 0 {
		return jetstream.KeyValuePut
	}
	if op := h.Get("KV-Operation"); op != "" {
		switch op {
		case "DEL":
			return jetstream.KeyValueDelete
		case "PURGE":
			return jetstream.KeyValuePurge
		}
		return jetstream.KeyValuePut
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// directGet is nats.go's direct get of a subject's last message
// ($JS.API.DIRECT.GET.<stream>.<subject>) and its reading of the answer's
// headers (jetstream's convertDirectGetMsgResponseToMsg).
func (f *KV) directGet(ctx context.Context, key string) (jetstream.RawStreamMsg, error) {
	ctx, cancel := withDefaultTimeout(ctx, f.defaultTimeout)
	defer cancel()
	r, err := f.nc.RequestWithContext(ctx, f.directPrefix+key, nil)
	if err != nil {
		return jetstream.RawStreamMsg{}, err
	}
	if len(r.Data) == 0 {
		if status := r.Header.Get("Status"); status != "" {
			if status == "404" {
				return jetstream.RawStreamMsg{}, jetstream.ErrMsgNotFound
			}
			desc := r.Header.Get("Description")
			if desc == "" {
				desc = "unable to get message"
			}
			return jetstream.RawStreamMsg{}, fmt.Errorf("nats: %s", desc)
		}
	}
	return directAnswer(r)
}

// directAnswer reads a direct get's answer headers into the message.
func directAnswer(r *nats.Msg) (jetstream.RawStreamMsg, error) {
	if len(r.Header) == 0 {
		return jetstream.RawStreamMsg{}, errors.New("nats: response should have headers")
	}
	if r.Header.Get(jetstream.StreamHeader) == "" {
		return jetstream.RawStreamMsg{}, errors.New("nats: missing stream header")
	}
	seqStr := r.Header.Get(jetstream.SequenceHeader)
	if seqStr == "" {
		return jetstream.RawStreamMsg{}, errors.New("nats: missing sequence header")
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return jetstream.RawStreamMsg{}, fmt.Errorf("nats: invalid sequence header '%s': %v", seqStr, err)
	}
	timeStr := r.Header.Get(jetstream.TimeStampHeaer)
	if timeStr == "" {
		return jetstream.RawStreamMsg{}, errors.New("nats: missing timestamp header")
	}
	tm, err := time.Parse(time.RFC3339Nano, timeStr)
	if err != nil {
		return jetstream.RawStreamMsg{}, fmt.Errorf("nats: invalid timestamp header '%s': %v", timeStr, err)
	}
	subj := r.Header.Get(jetstream.SubjectHeader)
	if subj == "" {
		return jetstream.RawStreamMsg{}, errors.New("nats: missing subject header")
	}
	return jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: r.Header, Data: r.Data, Time: tm}, nil
}
