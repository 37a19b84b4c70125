package sluicetest

import (
	"testing"
	"time"
)

// eventuallyEvery is how often Eventually asks again: often enough that a test waiting
// for a delivery loses no more than a few milliseconds, rarely enough that a condition
// reading a remote backend's cached count costs nothing.
const eventuallyEvery = 5 * time.Millisecond

// Eventually polls cond until it holds, and fails t, naming what it waited for, when it
// has not within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(eventuallyEvery)
	}
}
