//go:build race

package main

// raceEnabled: under the race detector the instrumented tests load the
// machine; the stop-time bound is checked without it.
const raceEnabled = true
