package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/chaos"
)

// inFleetGroup makes a poll process a member of the poller group "fleet".
const inFleetGroup = "MOLECULE_POLLER_GROUP=fleet"

// groupStages is a poller group's pipeline as separate processes of bin:
// procs[0] dispatch, procs[1] reply, procs[2:] the poll members, in the
// order started. Each logs to dir/<name>.log; a failed test shows the
// tail of every log.
type groupStages struct {
	t     *testing.T
	bin   string
	dir   string
	env   []string
	procs []*chaos.Process
}

// startGroupStages starts dispatch, reply and three members poll-1..3.
func startGroupStages(t *testing.T, bin, dir string, env []string) *groupStages {
	g := &groupStages{t: t, bin: bin, dir: dir, env: env}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range g.procs {
				t.Logf("--- %s ---\n%s", p.Name, p.Tail(3000))
			}
		}
	})
	g.start("dispatch", "dispatch")
	g.start("reply", "reply")
	for i := 1; i <= 3; i++ {
		g.start(fmt.Sprintf("poll-%d", i), "poll", inFleetGroup)
	}
	return g
}

// start runs one more process of command cmd with the common environment
// and extra, and adds it to procs; the test's cleanup stops it.
func (g *groupStages) start(name, cmd string, extra ...string) *chaos.Process {
	g.t.Helper()
	p := chaos.NewProcess(name, g.bin, []string{cmd}, append(slices.Clone(g.env), extra...), filepath.Join(g.dir, name+".log"))
	g.t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.procs = append(g.procs, p)
	return p
}
