package poller

import "time"

// UseClockGrid makes p's clock round delays of 20 steps and more up to
// step, before p runs: the shipped 250 ms step applies to delays of 5 s
// and more, too long for a test.
func UseClockGrid(p *Poller, step time.Duration) { p.clock.grid, p.clock.gridFrom = step, 20*step }

// StartConcurrency is how many workspaces start at once.
const StartConcurrency = startConcurrency
