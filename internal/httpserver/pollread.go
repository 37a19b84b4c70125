package httpserver

import (
	"sync/atomic"
	"time"
)

// Reads of the connections handed to net/http, while the CPU is saturated.
//
// net/http serves every request the lean path does not take (GET /healthz, /readyz,
// /metrics, the dashboard, chunked or Expect requests) and waits for a keep-alive
// connection's next request on the network poller. On a saturated single-P scheduler
// the poller's wake-up waits in the global run queue, as the accept loop's did
// (accept.go): a health probe's second request on its connection took far longer at the
// start of a JetStream overload than its first, on a new connection
// (docs/decisions/0012-timer-polled-reads.md). So while
// the acceptor polls (the process's CPU is saturated), a handed-off connection's read
// first waits on a timer: it asks the kernel whether bytes are there (poll(2), zero
// timeout) and sleeps acceptPoll if not, then reads. A goroutine a timer wakes runs
// next. At most maxPollingReads connections poll at once; any more wait on the poller
// as before, so a client holding many such connections open costs at most that many
// polls per acceptPoll. The read deadline net/http sets is kept: the wait ends when it
// passes and the read returns net/http's timeout, as it would have.
//
// A read that began before the saturation would stay on the poller through it (as a
// probe's keep-alive connection, read at the start of an overload, did), so while the
// CPU is not saturated but other connections are open, a read waits on the poller for
// acceptBusyLook at a time and then looks again; with no other connection open (an idle
// broker and its scraper) it waits on the poller for as long as it takes. At most
// maxPollingReads reads look at once too; any more wait on the poller for as long.
const maxPollingReads = 16

// pollReads is a server's handed-off connections' share of polling.
type pollReads struct {
	busy    *atomic.Bool // the acceptor's mode: true while the CPU is saturated
	open    func() int   // the connections open (the limitListener's)
	active  atomic.Int32 // connections polling now
	looking atomic.Int32 // connections waiting on the poller acceptBusyLook at a time
}

// take counts one more in n unless maxPollingReads are counted already.
func take(n *atomic.Int32) bool {
	if n.Add(1) > maxPollingReads {
		n.Add(-1)
		return false
	}
	return true
}

// wait returns once p has something to read (or an error or end to report), its
// deadline (Unix ns, 0 for none) has passed, or the CPU is no longer saturated. It
// returns at once while the CPU is not saturated, when p has no file descriptor, or when
// maxPollingReads connections poll already.
func (r *pollReads) wait(p fdPoller, deadline *atomic.Int64) {
	if r == nil || p.rc == nil || !r.busy.Load() {
		return
	}
	if !take(&r.active) {
		return
	}
	defer r.active.Add(-1)
	for r.busy.Load() && !p.readable() {
		if d := deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
			return
		}
		time.Sleep(acceptPoll)
	}
}
