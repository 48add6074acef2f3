package events

import (
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkEnvelopeDecode compares the hand decoders with json.Unmarshal
// on the fixtures (docs/performance.md, "Toward the records floor").
func BenchmarkEnvelopeDecode(b *testing.B) {
	for _, name := range []string{"inbound_canvas", "inbound_peer", "reply_canvas", "reply_peer"} {
		data, err := os.ReadFile("testdata/" + name + ".json")
		if err != nil {
			b.Fatal(err)
		}
		inbound := name[0] == 'i'
		b.Run(name+"/json.Unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if inbound {
					err = json.Unmarshal(data, &Inbound{})
				} else {
					err = json.Unmarshal(data, &Reply{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/Decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if inbound {
					_, err = DecodeInbound(data)
				} else {
					_, err = DecodeReply(data)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
