package relay

import (
	"fmt"

	"github.com/molecule-ai/molecule-relay/internal/memory"
)

// Memory is the conversation memory MOLECULE_HISTORY_TURNS and
// MOLECULE_HISTORY_MAX_BYTES configure over the topology's memory stream;
// nil when turns is 0 (memory off).
func (rt *Runtime) Memory() (*memory.Store, error) {
	mem, err := memory.New(rt.Conn.JS, rt.Topo, memory.Config{Turns: rt.Cfg.HistoryTurns, MaxBytes: rt.Cfg.HistoryMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("MOLECULE_HISTORY_TURNS=%d: %w", rt.Cfg.HistoryTurns, err)
	}
	return mem, nil
}
