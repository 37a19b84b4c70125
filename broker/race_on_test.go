//go:build race

package broker

// raceEnabled: the race detector slows every request several times over, so latency
// comparisons are logged, not asserted.
const raceEnabled = true
