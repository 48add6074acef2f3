package jsfast

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// pubAckAnswers are answers the server writes, and shapes the hand path
// must decline or read exactly as encoding/json does.
var pubAckAnswers = []string{
	`{"stream":"KV_handled","seq":42}`,
	`{"stream":"KV_handled","seq":42,"duplicate":true}`,
	`{"stream":"KV_handled","domain":"hub","seq":18446744073709551615}`,
	`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"}}`,
	`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`,
	`{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`,
	`{"stream":"","seq":1}`,
	`{"seq":1}`,
	`{}`,
	`{"stream":"S","seq":-1}`,
	`{"stream":"S","seq":1.5}`,
	`{"stream":"S","seq":18446744073709551616}`,
	`{"stream":"S","seq":"1"}`,
	`{"stream":"S","seq":1,"val":"7"}`,
	`{"stream":"S","seq":1,"batch":"b","count":3}`,
	`{"Stream":"S","SEQ":1}`,
	`{"stream":"S\u0041","seq":1}`,
	`{"stream":"S","stream":"T","seq":1}`,
	`{"stream":null,"seq":1}`,
	`{"error":null,"stream":"S","seq":1}`,
	`{"error":{"code":400,"err_code":70000}}`,
	`{"error":{"code":400,"err_code":10071},"stream":"S","seq":3}`,
	`{"type":"io.nats.jetstream.api.v1.pub_ack","stream":"S","seq":1}`,
	` { "stream" : "S" , "seq" : 2 } `,
	`{"stream":"S","seq":1}x`,
	`[]`,
	``,
	`null`,
}

// byEncodingJSON is decodePubAck with the hand path declining always.
func byEncodingJSON(data []byte) (*jetstream.PubAck, error) {
	var a pubAckAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	return a.result()
}

func checkPubAckDecoder(t *testing.T, data []byte) {
	t.Helper()
	ack, err := decodePubAck(data)
	wantAck, wantErr := byEncodingJSON(data)
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	if !reflect.DeepEqual(ack, wantAck) || errText(err) != errText(wantErr) {
		t.Fatalf("%q: hand path gives %+v, %v; encoding/json %+v, %v", data, ack, err, wantAck, wantErr)
	}
}

// A publish's answer decodes to what encoding/json makes of it, as
// nats.go decodes it: the same PubAck or the same error.
func TestPubAckDecoderMatchesEncodingJSON(t *testing.T) {
	for _, a := range pubAckAnswers {
		checkPubAckDecoder(t, []byte(a))
	}
}

func FuzzPubAckDecoderMatchesEncodingJSON(f *testing.F) {
	for _, a := range pubAckAnswers {
		f.Add([]byte(a))
	}
	f.Fuzz(checkPubAckDecoder)
}
