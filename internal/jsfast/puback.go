package jsfast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/jsonread"
)

// publishMsg is jetstream.JetStream.PublishMsg without options: m is
// sent as a request, a no-responders answer (a stream leader moving) is
// retried as nats.go does, and the answer is read by decodePubAck.
// defaultTimeout bounds a ctx without a deadline, as nats.go's
// DefaultTimeout does; otherwise the request ends at ctx's deadline.
func publishMsg(ctx context.Context, nc *nats.Conn, defaultTimeout time.Duration, m *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := withDefaultTimeout(ctx, defaultTimeout)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		select {
		case <-ctx.Done():
		case <-time.After(jetstream.DefaultPubRetryWait):
		}
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	return decodePubAck(resp.Data)
}

// withDefaultTimeout bounds a ctx without a deadline by d, as nats.go's
// DefaultTimeout bounds its requests; a ctx with one is left as it is.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// pubAckAnswer is what nats.go decodes a publish's answer into
// (jetstream's unexported pubAckResponse), for the answers decodePubAck
// does not read by hand.
type pubAckAnswer struct {
	Type  string              `json:"type"`
	Error *jetstream.APIError `json:"error,omitempty"`
	*jetstream.PubAck
}

// decodePubAck returns what nats.go's publishMsg makes of a publish's
// answer: the PubAck; the server's error wrapped as "nats: %w" (so it
// matches its *jetstream.APIError and, by error code, the sentinels that
// carry one); ErrInvalidJSAck for anything else. The two answers the
// server writes for every publish — {"stream":..,"seq":..} with an
// optional domain and duplicate flag, and {"error":{...}} — are read by
// hand; any other (another key, an escape, a repeat) by encoding/json.
func decodePubAck(data []byte) (*jetstream.PubAck, error) {
	var a pubAckAnswer
	if !readPubAck(data, &a) {
		var ok bool
		if a, ok = unmarshalPubAck(data); !ok {
			return nil, jetstream.ErrInvalidJSAck
		}
	}
	return a.result()
}

// result is what the answer a says: its PubAck, the server's error, or
// ErrInvalidJSAck for an answer with neither.
func (a pubAckAnswer) result() (*jetstream.PubAck, error) {
	if a.Error != nil {
		return nil, fmt.Errorf("nats: %w", a.Error)
	}
	if a.PubAck == nil || a.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return a.PubAck, nil
}

// unmarshalPubAck is encoding/json's reading of an answer, in its own
// function so that the hand path's answer stays off the heap.
func unmarshalPubAck(data []byte) (pubAckAnswer, bool) {
	var a pubAckAnswer
	err := json.Unmarshal(data, &a)
	return a, err == nil
}

// readPubAck reads the exact keys the server writes; false declines.
func readPubAck(data []byte, a *pubAckAnswer) bool {
	var seen jsonread.Seen
	return jsonread.Object(data, func(key, val []byte) bool {
		switch string(key) {
		case "stream":
			return seen.First(0) && jsonread.String(val, &ack(a).Stream)
		case "seq":
			return seen.First(1) && readUint(val, 64, &ack(a).Sequence)
		case "domain":
			return seen.First(2) && jsonread.String(val, &ack(a).Domain)
		case "duplicate":
			return seen.First(3) && jsonread.Bool(val, &ack(a).Duplicate)
		case "error":
			a.Error = &jetstream.APIError{}
			return seen.First(4) && readAPIError(val, a.Error)
		}
		return false
	})
}

// ack is a's PubAck, allocated on its first field as encoding/json
// allocates an embedded pointer.
func ack(a *pubAckAnswer) *jetstream.PubAck {
	if a.PubAck == nil {
		a.PubAck = &jetstream.PubAck{}
	}
	return a.PubAck
}

// readAPIError reads {"code":..,"err_code":..,"description":..}; val is
// valid JSON already (it is a member of an object Object checked).
func readAPIError(val []byte, e *jetstream.APIError) bool {
	var seen jsonread.Seen
	return jsonread.ElementObject(val, func(key, v []byte) bool {
		switch string(key) {
		case "code":
			return seen.First(0) && jsonread.Int(v, &e.Code)
		case "err_code":
			var code uint64
			ok := seen.First(1) && readUint(v, 16, &code)
			e.ErrorCode = jetstream.ErrorCode(code)
			return ok
		case "description":
			return seen.First(2) && jsonread.String(v, &e.Description)
		}
		return false
	})
}

// readUint decodes an unsigned integer literal of bits bits as
// json.Unmarshal does (false for a sign, fraction, exponent or overflow).
func readUint(val []byte, bits int, into *uint64) bool {
	n, err := strconv.ParseUint(string(val), 10, bits)
	*into = n
	return err == nil
}
