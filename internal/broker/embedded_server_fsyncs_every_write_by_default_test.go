package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/molecule-ai/molecule-relay/internal/broker"
)

// The embedded server fsyncs every write before acknowledging it unless
// NATS_SYNC_INTERVAL says otherwise: nats-server's own default fsyncs
// every 2 minutes (v2.15.2 server/filestore.go:339 defaultSyncInterval),
// and a power cut then loses up to that much of the store
// (docs/powerloss.md, TestChaosPowerLoss).
func TestEmbeddedServerFsyncsEveryWriteByDefault(t *testing.T) {
	for _, tt := range []struct {
		setting      string
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"", true, 2 * time.Minute}, // SyncAlways; the interval stays the server's default
		{"always", true, 2 * time.Minute},
		{"30s", false, 30 * time.Second},
	} {
		c := connect(t, broker.Config{StoreDir: t.TempDir(), SyncInterval: tt.setting}, nil)
		js := c.Server.(interface {
			JetStreamConfig() *server.JetStreamConfig
		}).JetStreamConfig()
		if js.SyncAlways != tt.wantAlways || js.SyncInterval != tt.wantInterval {
			t.Errorf("NATS_SYNC_INTERVAL %q: the server's SyncAlways=%v SyncInterval=%s, want %v and %s",
				tt.setting, js.SyncAlways, js.SyncInterval, tt.wantAlways, tt.wantInterval)
		}
		c.Close()
	}
}
