package molecule_test

import (
	"context"
	"errors"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestActivityRowsCarrySeqAndPeerInfo: on a 2026-08 platform a page's rows
// carry their seq (ActivityRow.Seq, Message.Seq) and, with
// IncludePeerInfo, a peer row parses into PeerName, PeerRole and
// AgentCardURL; a canvas row has none. On 2026-05 the same query reads no
// seq and no peer fields (the platform ignores include).
func TestActivityRowsCarrySeqAndPeerInfo(t *testing.T) {
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_08, moleculetest.Gen2026_05} {
		t.Run(gen.String(), func(t *testing.T) {
			s := platform(t, moleculetest.WithGeneration(gen))
			a, c := registered(t, s, "ext-A")
			b := s.CreateWorkspace("ext-B")
			s.SetRole(b.ID, "reviewer")
			ctx := context.Background()
			if code, _, err := s.SendCanvas(ctx, a.ID, "from canvas"); err != nil || code != 200 {
				t.Fatal(code, err)
			}
			if code, _, err := s.SendPeer(ctx, b, a.ID, "from B"); err != nil || code != 200 {
				t.Fatal(code, err)
			}
			page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", IncludePeerInfo: true})
			if err != nil || len(page.Rows) != 2 {
				t.Fatalf("Activity: %v rows, %v", page, err)
			}
			canvas, peer := page.Rows[0], page.Rows[1]
			mc, err := canvas.Parse(a.ID)
			if err != nil {
				t.Fatal(err)
			}
			mp, err := peer.Parse(a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if gen == moleculetest.Gen2026_05 {
				if canvas.Seq != 0 || mp.Seq != 0 || mp.PeerName != "" || mp.AgentCardURL != "" {
					t.Errorf("2026-05 row read seq %d/%d, peer %q %q", canvas.Seq, mp.Seq, mp.PeerName, mp.AgentCardURL)
				}
				return
			}
			if canvas.Seq <= 0 || peer.Seq <= canvas.Seq || mp.Seq != peer.Seq || mc.Seq != canvas.Seq {
				t.Errorf("seqs: canvas %d (message %d), peer %d (message %d)", canvas.Seq, mc.Seq, peer.Seq, mp.Seq)
			}
			if mp.PeerName != "ext-B" || mp.PeerRole != "reviewer" || mp.AgentCardURL != s.URL()+"/registry/discover/"+b.ID {
				t.Errorf("peer row: %q %q %q", mp.PeerName, mp.PeerRole, mp.AgentCardURL)
			}
			if mc.PeerName != "" || mc.PeerRole != "" || mc.AgentCardURL != "" {
				t.Errorf("canvas row: %q %q %q", mc.PeerName, mc.PeerRole, mc.AgentCardURL)
			}
		})
	}
}

// TestAckActivity: AckActivity posts {"acked_seq": n} and returns the
// platform's stored seq, which never moves back; a negative seq is refused
// before sending; a 2026-05 platform answers 404 (ErrNotFound).
func TestAckActivity(t *testing.T) {
	ctx := context.Background()
	s := platform(t)
	a, c := registered(t, s, "ext-A")
	if got, err := c.AckActivity(ctx, 9); err != nil || got != 9 {
		t.Fatalf("AckActivity(9) = %d, %v", got, err)
	}
	if got, err := c.AckActivity(ctx, 4); err != nil || got != 9 {
		t.Errorf("AckActivity(4) = %d, %v; want the stored 9", got, err)
	}
	if _, err := c.AckActivity(ctx, -1); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Errorf("AckActivity(-1): %v", err)
	}
	if s.AckedSeq(a.ID) != 9 {
		t.Errorf("platform acked %d", s.AckedSeq(a.ID))
	}
	old := platform(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	_, oc := registered(t, old, "ext-A")
	if _, err := oc.AckActivity(ctx, 1); !errors.Is(err, molecule.ErrNotFound) {
		t.Errorf("AckActivity on 2026-05: %v, want ErrNotFound", err)
	}
}
