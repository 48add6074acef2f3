package uuid_test

import (
	"regexp"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/uuid"
)

var v4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewIsARandomVersion4UUID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := uuid.New()
		if !v4.MatchString(id) || !uuid.Valid(id) {
			t.Fatalf("New() = %q, not a canonical version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("New() repeated %q", id)
		}
		seen[id] = true
	}
}

// The reply messageIds the relay has always sent are FromName values: they
// must not change, or a reply retried across an upgrade would carry a new id
// and the receiver's de-duplication would not recognise it.
func TestFromNameIsStable(t *testing.T) {
	for name, want := range map[string]string{
		"molecule-relay/reply/act-1": "9d81fcbf-aeb1-5d32-b220-a682e6518229",
		"":                           "da39a3ee-5e6b-5b0d-b255-bfef95601890",
	} {
		if got := uuid.FromName(name); got != want {
			t.Errorf("FromName(%q) = %s, want %s", name, got, want)
		}
	}
}

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"00000000-0000-0000-0000-000000000000": true,
		"3563A1B2-d55e-4553-896c-13c2e02fe4f7": true,
		"3563a1b2-d55e-4553-896c-13c2e02fe4f":  false,
		"3563a1b2+d55e-4553-896c-13c2e02fe4f7": false,
		"3563a1b2-d55e-4553-896c-13c2e02fe4fg": false,
		"":                                     false,
	} {
		if got := uuid.Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}
