package molecule

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The heartbeat body is encoded by hand (33 a second at a thousand
// workspaces) and must be byte for byte what json.Marshal writes, also for
// the values the hand encoder leaves to json.Marshal.
func TestHeartbeatBodyEncodesLikeJSON(t *testing.T) {
	all := Capabilities{Heartbeat: true, Scheduler: true, Session: true, StatusMgmt: true, Retry: true, ActivityDecoration: true, ChannelDispatch: true}
	bodies := []heartbeatBody{
		{},
		{WorkspaceID: "9f0c-ws", ActiveTasks: 3, UptimeSeconds: 86400, ErrorRate: 0.25, SampleError: "poll: timeout",
			RuntimeMetadata: runtimeMetadata{Capabilities: all, IdleTimeoutSeconds: 120, RelayVersion: "v1.2.3", RelayInstance: "host-1/42"}},
		{ErrorRate: 1.0 / 3, RuntimeState: "wedged", RuntimeMetadata: runtimeMetadata{Capabilities: Capabilities{Heartbeat: true}, RelayVersion: "(devel)"}},
		{ErrorRate: 1e-7, CurrentTask: "say \"hi\" <now> & then\n"}, // an exponent, escapes: json.Marshal's own
		{ErrorRate: 1e-6, SampleError: "héllo", ActiveTasks: -1},
		{ErrorRate: 123456789.125, RuntimeMetadata: runtimeMetadata{RelayVersion: "v0.0.0-20261126-abc+dirty"}},
	}
	for i, b := range bodies {
		got, err := b.marshal()
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("body %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
