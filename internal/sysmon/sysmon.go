// Package sysmon keeps the Go runtime's system monitor out of deep sleep, which on a
// broker that idles between events costs more CPU than the events themselves.
//
// The runtime's monitor thread (sysmon) sleeps on a futex whenever every P is idle, and
// every system call made after that wakes it again and restarts its polling at 20 µs
// intervals. A broker at a few thousand events per second goes idle between most
// events, so each event pays for waking sysmon and for several of its 20 µs sleeps: a
// futex wake and a handful of context switches per event, which on a virtual machine
// cost as much as the event's own work (docs/benchmarks/hot-path.md has the profile
// and the measurement). The runtime skips the deep sleep only while a scheduler trace
// is requested (GODEBUG=schedtrace=N), in which case sysmon backs off to its ordinary
// 10 ms period instead. Keep sets the longest trace period the runtime accepts
// (2^31−1 ms, 24.8 days), so no trace is printed in practice, and the monitor wakes
// 100 times a second at most when the broker is idle.
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Setting is the GODEBUG entry Keep adds.
const Setting = "schedtrace=2147483647"

// Keep re-executes the running binary with Setting added to GODEBUG unless GODEBUG
// already names schedtrace (the user's choice is kept; GODEBUG=schedtrace=0 turns this
// off). It returns only if it did not re-execute: the setting was there already, or the
// executable could not be found or executed (the process then runs as it is, the
// runtime merely less frugal). The process keeps its PID, arguments, environment but
// for GODEBUG, CPU affinity and open file descriptors.
func Keep() {
	env := os.Environ()
	next, ok := withSetting(env)
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, next)
}

// withSetting returns env with Setting added to its GODEBUG, and false if GODEBUG
// already names schedtrace.
func withSetting(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		v, isGodebug := strings.CutPrefix(kv, "GODEBUG=")
		if !isGodebug {
			out = append(out, kv)
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(f, "="); strings.TrimSpace(name) == "schedtrace" {
				return env, false
			}
		}
		found = true
		if v == "" {
			out = append(out, "GODEBUG="+Setting)
		} else {
			out = append(out, "GODEBUG="+v+","+Setting)
		}
	}
	if !found {
		out = append(out, "GODEBUG="+Setting)
	}
	return out, true
}
