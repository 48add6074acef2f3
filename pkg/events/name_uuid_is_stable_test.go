package events_test

import (
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The reply messageIds the relay has always sent are NameUUID values: they
// must not change, or a reply retried across an upgrade would carry a new id
// and the receiver's de-duplication would not recognise it.
func TestNameUUIDIsStable(t *testing.T) {
	for name, want := range map[string]string{
		"molecule-relay/reply/act-1": "9d81fcbf-aeb1-5d32-b220-a682e6518229",
		"":                           "da39a3ee-5e6b-5b0d-b255-bfef95601890",
	} {
		if got := events.NameUUID(name); got != want {
			t.Errorf("NameUUID(%q) = %s, want %s", name, got, want)
		}
	}
	if got, want := events.ReplyMessageID("act-1"), "9d81fcbf-aeb1-5d32-b220-a682e6518229"; got != want {
		t.Errorf("ReplyMessageID(act-1) = %s, want %s", got, want)
	}
}
