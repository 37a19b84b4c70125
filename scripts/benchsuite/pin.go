package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The pinned layout: each broker (or nginx) runs on CPU 1 alone (`taskset -c 1`), this
// process — load generator and receivers — on CPU 0, so the CPU a broker spends is not
// taken from the generator's share and the other way round. It needs two CPUs.

// pinSelf moves every thread of this process to CPU 0 when pinned, or lets them run on
// every CPU when not, and returns a function restoring the previous placement. Threads
// the runtime starts later inherit the placement of the thread that starts them.
func pinSelf(pinned bool) (restore func(), err error) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var set unix.CPUSet
	if pinned {
		set.Set(0)
	} else {
		for i := range runtime.NumCPU() {
			set.Set(i)
		}
	}
	if err := setAllThreads(&set); err != nil {
		return nil, err
	}
	return func() { _ = setAllThreads(&before) }, nil
}

// setAllThreads applies set to every thread of this process.
func setAllThreads(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
		}
	}
	return nil
}
