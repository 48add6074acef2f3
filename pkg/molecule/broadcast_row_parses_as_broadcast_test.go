package molecule_test

import (
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// A broadcast_receive row (enteros-core aeec8e47
// workspace-server/internal/handlers/workspace_broadcast.go:154-157: no
// request_body, method "broadcast", source_id the sender) parses as
// KindBroadcast from a peer, its summary as text, and is not skipped.
func TestBroadcastRowParsesAsBroadcast(t *testing.T) {
	const self, sender = "11111111-1111-4111-8111-111111111111", "33333333-3333-4333-8333-333333333333"
	raw := []byte(`{"id":"22222222-2222-4222-8222-222222222222","workspace_id":"` + self + `","activity_type":"broadcast_receive",` +
		`"source_id":"` + sender + `","target_id":null,"method":"broadcast","summary":"Broadcast from announcer: maintenance at 5",` +
		`"request_body":null,"response_body":null,"duration_ms":null,"status":"ok","error_detail":null,"created_at":"2026-08-14T10:00:00.123456Z"}`)
	m, err := molecule.ParseRow(raw, self)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != molecule.KindBroadcast || m.Sender != molecule.SenderPeer || m.SourceID != sender || m.Text != "Broadcast from announcer: maintenance at 5" {
		t.Errorf("parsed %+v", m)
	}
	if r := m.Skip(false); r != "" {
		t.Errorf("skipped: %s", r)
	}
}
