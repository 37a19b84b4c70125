package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/channel"
)

// Dispatcher delivers one trigger's (or subscription's) messages from a channel consumer
// to its subscriber under the Knative delivery contract; see the package doc for the
// semantics. Create one per trigger with NewDispatcher, start it with Run, reconfigure it
// with Update and stop it with Drain or by cancelling Run's context.
//
// Concurrency: Update, Drain and Limit are safe to call from any goroutine while Run
// runs. Run may be called once.
//
// Bounds: workers, started on demand up to MaxInFlight and leaving when idle, make the
// HTTP attempts;
// at most MaxInFlight + MaxPending messages are held (received and not yet settled);
// retries wait on timers without holding a worker.
type Dispatcher struct {
	c            channel.Consumer
	client       *http.Client
	replier      Replier
	deadLetterer DeadLetterer
	log          *slog.Logger
	metrics      *Metrics
	adaptive     bool
	maxReply     int64
	maxPending   int

	target atomic.Pointer[resolved]
	tm     atomic.Pointer[triggerMetrics]
	bad    error // an invalid initial target; Run returns it

	lim   *limiter
	held  *semaphore // bounds messages held (in flight + pending)
	ready chan *job  // jobs due for an attempt; capacity ≥ the held bound, so sends never block
	seq   sequencer  // per-key serialisation of ordered targets
	jobs  sync.WaitGroup
	count atomic.Int64 // jobs held, for Drain
	left  atomic.Int64 // messages released unsettled

	mu         sync.Mutex
	waiting    map[*job]struct{} // jobs waiting on a retry timer
	stopping   bool              // hard stop: release everything
	workers    int               // workers running
	maxWorkers int               // bound on workers: the in-flight limit
	idle       atomic.Int32      // workers waiting for work
	quit       chan struct{}
	workerWG   sync.WaitGroup
	started    bool
	hardCancel context.CancelFunc
	recvCancel context.CancelFunc
	hardCtx    context.Context
	runDone    chan struct{}
	startedCh  chan struct{} // closed when Run starts
}

// NewDispatcher returns a dispatcher that delivers the messages of c to t. An invalid
// target URL is logged and returned by Run.
func NewDispatcher(c channel.Consumer, t Target, opts ...Option) *Dispatcher {
	d := &Dispatcher{c: c, adaptive: true, maxReply: defaultMaxRepl, waiting: make(map[*job]struct{}),
		quit: make(chan struct{}), runDone: make(chan struct{}), startedCh: make(chan struct{})}
	for _, o := range opts {
		o(d)
	}
	if d.client == nil {
		d.client = NewClient()
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("trigger", t.Name)
	if d.metrics == nil {
		d.metrics = NewMetrics(nil)
	}
	r, err := resolve(t)
	if err != nil {
		d.bad = fmt.Errorf("trigger %s: %w", t.Name, err)
		d.log.Error("invalid delivery target", "err", err)
		r = &resolved{Target: t}
	}
	d.target.Store(r)
	tm := d.metrics.forTrigger(t.Name)
	d.tm.Store(tm)
	mif := t.maxInFlight()
	if d.maxPending <= 0 {
		d.maxPending = max(4*mif, 256)
	}
	d.held = newSemaphore(mif + d.maxPending)
	d.ready = make(chan *job, mif+d.maxPending)
	d.lim = newLimiter(mif, d.adaptive, tm.limit)
	return d
}

// Limit returns the current in-flight limit toward the subscriber (adaptive or fixed).
func (d *Dispatcher) Limit() int { return d.lim.current() }

// Update applies a new configuration: URL, reply URL, policy, ordering and MaxInFlight
// take effect from the next attempt; messages held are not lost. An invalid target is
// logged and ignored (the old one stays). MaxPending cannot change.
func (d *Dispatcher) Update(t Target) {
	r, err := resolve(t)
	if err != nil {
		d.log.Error("invalid delivery target; keeping the previous one", "err", err)
		return
	}
	old := d.target.Swap(r)
	if old.Name != t.Name {
		d.tm.Store(d.metrics.forTrigger(t.Name))
	}
	mif := t.maxInFlight()
	d.lim.setMax(mif)
	d.mu.Lock()
	if d.started && !d.stopping {
		d.growWorkersLocked(mif)
	}
	d.bad = nil
	d.mu.Unlock()
}

// growWorkersLocked raises the bound on workers to n (at most the messages held, more
// would idle). Workers themselves start on demand, in pushLocked.
func (d *Dispatcher) growWorkersLocked(n int) {
	d.maxWorkers = min(n, cap(d.ready))
}

// push makes j due for a worker. When a worker is idle it needs no lock: a worker that
// leaves stops counting as idle before it checks for work (under d.mu), so either it
// sees j, or this push sees no idle worker and takes the slow path, which starts one.
func (d *Dispatcher) push(j *job) {
	d.ready <- j
	if d.idle.Load() > 0 {
		return
	}
	d.mu.Lock()
	d.spawnLocked()
	d.mu.Unlock()
}

// pushLocked makes j due for a worker, starting one if none is idle and fewer than
// maxWorkers run. Workers are started on demand and leave after workerIdle without work
// (one stays), so a trigger that receives little holds few goroutines: a hundred quiet
// triggers do not cost a hundred pools of MaxInFlight stacks for the GC to scan.
// Called with d.mu held.
func (d *Dispatcher) pushLocked(j *job) {
	d.ready <- j
	d.spawnLocked()
}

// spawnLocked starts a worker if none is idle and the bound allows. Called with d.mu held.
func (d *Dispatcher) spawnLocked() {
	if d.idle.Load() == 0 && d.workers < d.maxWorkers && !d.stopping {
		d.workers++
		d.workerWG.Add(1)
		go d.worker()
	}
}

// workerIdle is how long a worker waits for work before it leaves.
const workerIdle = 10 * time.Second

// Run takes messages from the consumer and delivers them until ctx ends, the consumer is
// closed, or Drain stops it. When the consumer closes, messages held are still delivered
// (retries included) before Run returns nil. When ctx ends, attempts in progress are
// cancelled and every message held is released unsettled (counted, logged, and reported
// by Drain); Run then returns nil too. It returns an error only for an invalid target or
// a second call.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("delivery: Dispatcher.Run called twice")
	}
	if d.bad != nil {
		d.mu.Unlock()
		close(d.runDone)
		return d.bad
	}
	d.started = true
	hard, hardCancel := context.WithCancel(ctx)
	recv, recvCancel := context.WithCancel(hard)
	d.hardCtx, d.hardCancel, d.recvCancel = hard, hardCancel, recvCancel
	d.growWorkersLocked(d.target.Load().maxInFlight())
	close(d.startedCh)
	d.mu.Unlock()
	defer close(d.runDone)
	defer hardCancel()

	d.receive(recv)

	allDone := make(chan struct{})
	go func() { d.jobs.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-hard.Done():
		d.stopAll()
		<-allDone
	}
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	close(d.quit)
	d.workerWG.Wait()
	return nil
}

// receive is the loop that takes messages, one held slot each, until ctx ends or the
// consumer closes.
func (d *Dispatcher) receive(ctx context.Context) {
	for {
		if err := d.held.acquire(ctx); err != nil {
			return
		}
		msg, err := d.c.Receive(ctx)
		if err != nil {
			d.held.release()
			if errors.Is(err, channel.ErrClosed) || ctx.Err() != nil {
				return
			}
			d.log.Warn("receiving from the channel failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		d.count.Add(1)
		d.jobs.Add(1)
		d.admit(newJob(msg))
	}
}

// admit starts a new job, behind earlier jobs of its key on an ordered target.
func (d *Dispatcher) admit(j *job) {
	if d.target.Load().Ordered {
		j.ordered = true
		j.key, _ = j.ev.Get(ExtPartitionKey)
		if !d.seq.admit(j) {
			return
		}
	}
	d.push(j)
}

func (d *Dispatcher) worker() {
	defer d.workerWG.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		d.idle.Add(1)
		select {
		case j := <-d.ready:
			d.idle.Add(-1)
			d.process(j)
		case <-d.quit:
			d.idle.Add(-1)
			return
		case <-idle.C:
			// Leave, unless work arrived meanwhile or this is the last worker. Under d.mu,
			// so that pushLocked either sees this worker no longer idle (and starts
			// another) or pushed before the check below (and this worker stays).
			d.mu.Lock()
			d.idle.Add(-1)
			if len(d.ready) == 0 && d.workers > 1 {
				d.workers--
				d.mu.Unlock()
				return
			}
			d.mu.Unlock()
		}
		idle.Reset(workerIdle)
	}
}

// schedule makes j due again after wait, on a timer that holds no worker.
func (d *Dispatcher) schedule(j *job, wait time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if wait <= 0 || d.stopping {
		d.pushLocked(j)
		return
	}
	d.waiting[j] = struct{}{}
	j.timer = time.AfterFunc(wait, func() { d.wake(j) })
}

func (d *Dispatcher) wake(j *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.waiting[j]; ok {
		delete(d.waiting, j)
		j.timer = nil
		d.pushLocked(j)
	}
}

// stopAll is the hard stop: jobs waiting on timers are made due at once, so that the
// workers, seeing the stop, release them.
func (d *Dispatcher) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping = true
	for j := range d.waiting {
		if j.timer.Stop() {
			delete(d.waiting, j)
			j.timer = nil
			d.pushLocked(j)
		} // else the timer fired and wake will hand it over.
	}
}

// Drain stops the dispatcher for shutdown: it stops receiving once the consumer is empty
// and nothing is held, and waits for Run to return. If ctx ends first, attempts in
// progress are cancelled and every message still held is released unsettled (a durable
// channel redelivers it later; a memory channel loses it, which is counted and logged).
// It returns how many messages were left undelivered. If Run has not started yet, Drain
// returns 0 at once when the consumer is empty, and otherwise waits for Run to start
// (until ctx ends, returning the consumer's length).
func (d *Dispatcher) Drain(ctx context.Context) (left int) {
	select {
	case <-d.startedCh:
	case <-ctx.Done():
		return d.c.Len() // never ran: everything is still in the channel
	default:
		if d.c.Len() == 0 {
			return 0 // never ran and nothing to deliver
		}
		select { // Run is presumably being started: wait for it
		case <-d.startedCh:
		case <-ctx.Done():
			return d.c.Len()
		}
	}
	d.mu.Lock()
	recvCancel, hardCancel := d.recvCancel, d.hardCancel
	d.mu.Unlock()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for d.c.Len() > 0 || d.count.Load() > 0 {
		select {
		case <-d.runDone:
			return int(d.left.Load())
		case <-ctx.Done():
			hardCancel()
			<-d.runDone
			return int(d.left.Load())
		case <-tick.C:
		}
	}
	recvCancel()
	select {
	case <-d.runDone:
	case <-ctx.Done():
		hardCancel()
		<-d.runDone
	}
	return int(d.left.Load())
}
