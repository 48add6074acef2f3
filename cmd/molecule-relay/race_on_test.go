//go:build race

package main

// raceEnabled: timings measured under the race detector are several times
// slower; the stop-time bound is checked without it.
const raceEnabled = true
