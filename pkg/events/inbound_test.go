package events_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

func TestNewInboundMapsTheSender(t *testing.T) {
	const ws, peer = "35637291-d55e-4553-896c-13c2e02fe4f7", "b48f61e0-0000-4000-8000-000000000001"
	polled := time.Now().UTC()
	for _, tc := range []struct {
		name     string
		m        molecule.Message
		source   events.Source
		sourceWS string
		cron     bool
	}{
		{"canvas", molecule.Message{Sender: molecule.SenderCanvasUser}, events.SourceCanvasUser, "", false},
		{"cron", molecule.Message{Sender: molecule.SenderCron}, events.SourceCanvasUser, "", true},
		{"peer", molecule.Message{Sender: molecule.SenderPeer, SourceID: peer}, events.SourcePeerAgent, peer, false},
		{"self", molecule.Message{Sender: molecule.SenderSelf, SourceID: ws}, events.SourceSelf, ws, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.ActivityID, m.Text = "act-1", "hello"
			m.Attachments = []molecule.Attachment{{URI: "workspace:/a.txt", Name: "a.txt"}}
			in := events.NewInbound(ws, &m, polled)
			if in.Source != tc.source || in.SourceWorkspaceID != tc.sourceWS || in.Cron != tc.cron {
				t.Errorf("source %q/%q cron %v, want %q/%q %v", in.Source, in.SourceWorkspaceID, in.Cron, tc.source, tc.sourceWS, tc.cron)
			}
			if in.WorkspaceID != ws || in.ActivityID != "act-1" || in.Text != "hello" || !in.PolledAt.Equal(polled) ||
				len(in.Attachments) != 1 || in.Attachments[0].Name != "a.txt" {
				t.Errorf("envelope %+v", in)
			}
		})
	}
}
