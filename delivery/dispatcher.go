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

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
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
// HTTP attempts; at most MaxInFlight + MaxPending messages are held (received and not
// yet settled); retries wait on timers without holding a worker.
//
// Lifecycle: Run's goroutine is the one owner. It runs the receive loop itself, starts
// every worker through d.workers, and returns only after the jobs it received are
// settled or released and every worker has returned. Two contexts derive from Run's:
// ctx bounds the attempts (cancelled by the hard stop) and its child recv the receive
// loop (cancelled by Drain once nothing is left). Two channels mark Run's start and end.
type Dispatcher struct {
	c            channel.Consumer
	client       *http.Client
	tokens       TokenSource
	own          ownIngress      // WithOwnIngress
	warn         *ratelog.Logger // warnings that repeat: a missing token, a reply not stored
	replier      Replier
	deadLetterer DeadLetterer
	log          *slog.Logger
	metrics      *Metrics
	adaptive     bool
	maxReply     int64
	maxPending   int
	tracer       trace.Tracer   // nil: tracing off
	dlHook       DeadLetterHook // nil: none
	dlq          DLQStorer      // nil: none (dlq.go)

	target atomic.Pointer[resolved]
	tm     atomic.Pointer[triggerMetrics]
	bad    error // an invalid initial target; Run returns it

	lim  *limiter
	pace atomic.Pointer[pacer] // the delivery-rate cap; nil: none (pacer.go)

	batcher batcher    // batches being gathered (Target.Batch > 1)
	held    *semaphore // bounds messages held (in flight + pending)
	ready   chan *job  // jobs due for an attempt; capacity ≥ the held bound, so sends never block
	seq     sequencer  // per-key serialisation of ordered targets
	jobs    tally      // jobs held (received, not yet settled or released)
	left    atomic.Int64

	// Set by Run before it closes started, read-only afterwards.
	ctx      context.Context    // the attempts' context
	hardStop context.CancelFunc // cancels ctx: attempts stop, held jobs are released
	stopRecv context.CancelFunc // ends the receive loop

	started chan struct{} // closed when Run starts
	done    chan struct{} // closed when Run returns
	workers sync.WaitGroup

	mu         sync.Mutex
	waiting    map[*job]struct{} // jobs waiting on a retry timer
	pause      pauseState        // Pause and Resume (pause.go)
	running    bool              // Run was called
	noRecv     bool              // StopReceiving was called: Run receives nothing
	inj        []*injection      // messages handed over by Redeliver, oldest first
	injN       atomic.Int32      // len(inj), read without the lock on the receive path
	injClosed  bool              // the receive loop ended: Redeliver refuses
	stopping   bool              // hard stop or end of Run: no more workers
	nWorkers   int               // workers running
	maxWorkers int               // bound on workers: the in-flight limit
	idle       atomic.Int32      // workers waiting for work
	ownClient  bool              // the client was made by NewDispatcher: Run closes its idle connections
}

// NewDispatcher returns a dispatcher that delivers the messages of c to t. An invalid
// target URL is logged and returned by Run.
func NewDispatcher(c channel.Consumer, t Target, opts ...Option) *Dispatcher {
	d := &Dispatcher{c: c, adaptive: true, maxReply: DefaultMaxReplyBytes, waiting: make(map[*job]struct{}),
		started: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(d)
	}
	if d.client == nil {
		d.client = NewClient()
		d.ownClient = true
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("trigger", t.Name)
	d.warn = ratelog.New(d.log)
	if d.metrics == nil {
		d.metrics = NewMetrics(nil)
	}
	r, err := resolve(t, denyListOf(d.client))
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
	d.setRate(r.MaxDeliveryRate)
	return d
}

// Limit returns the current in-flight limit toward the subscriber (adaptive or fixed).
func (d *Dispatcher) Limit() int { return d.lim.current() }

// Update applies a new configuration: URL, reply URL, policy, ordering, MaxInFlight and
// MaxDeliveryRate take effect from the next attempt (attempts waiting for a rate token
// wait again under the new rate); messages held are not lost. MaxInFlight above its
// value at NewDispatcher is bounded by the messages held, MaxInFlight + MaxPending as
// sized then. An invalid target is
// logged and ignored (the old one stays). MaxPending cannot change.
func (d *Dispatcher) Update(t Target) {
	r, err := resolve(t, denyListOf(d.client))
	if err != nil {
		d.log.Error("invalid delivery target; keeping the previous one", "err", err)
		return
	}
	old := d.target.Swap(r)
	if old.subClient != nil || old.dlsClient != nil {
		old.closeIdle() // attempts in flight keep theirs; idle ones go
	}
	if old.Name != t.Name {
		d.tm.Store(d.metrics.forTrigger(t.Name))
	}
	mif := t.maxInFlight()
	d.lim.setMax(mif)
	d.mu.Lock()
	d.setRate(t.MaxDeliveryRate)
	if d.running && !d.stopping {
		d.growWorkersLocked(mif)
		// Jobs already due were pushed under the old bound: start the workers the new one
		// allows for them now, not when a busy worker comes back.
		for n := len(d.ready); n > 0 && d.nWorkers < d.maxWorkers; n-- {
			d.nWorkers++
			d.workers.Go(d.worker)
		}
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
	if d.batchable(j) {
		d.addToBatch(j)
		return
	}
	d.pushDirect(j)
}

// pushDirect is push without batching.
func (d *Dispatcher) pushDirect(j *job) {
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

// spawnLocked starts a worker if none is idle and the bound allows; once stopping, only
// if none runs (someone must release what is pushed). Called with d.mu held.
func (d *Dispatcher) spawnLocked() {
	if d.idle.Load() == 0 && d.nWorkers < d.maxWorkers && (!d.stopping || d.nWorkers == 0) {
		d.nWorkers++
		d.workers.Go(d.worker)
	}
}

// workerIdle is how long a worker waits for work before it leaves.
const workerIdle = 10 * time.Second

// Run takes messages from the consumer and delivers them until ctx ends, the consumer is
// closed, or Drain stops it. When the consumer closes, messages held are still delivered
// (retries included) before Run returns nil. When ctx ends, attempts in progress are
// cancelled and every message held is released unsettled (counted, logged, and reported
// by Drain); Run then returns nil too. It returns an error only for an invalid target or
// a second call. It returns after every goroutine it started.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return errors.New("delivery: Dispatcher.Run called twice")
	}
	d.running = true
	if d.bad != nil {
		d.mu.Unlock()
		close(d.done)
		return d.bad
	}
	d.ctx, d.hardStop = context.WithCancel(ctx)
	recv, stopRecv := context.WithCancel(d.ctx)
	d.stopRecv = stopRecv
	if d.noRecv {
		stopRecv()
	}
	d.growWorkersLocked(d.target.Load().maxInFlight())
	close(d.started)
	d.mu.Unlock()
	defer close(d.done)
	defer d.hardStop()

	d.receive(recv)

	// Nothing more is received: wait for the jobs held, or release them on a hard stop.
	select {
	case <-d.jobs.idle():
	case <-d.ctx.Done():
		d.stopAll()
		<-d.jobs.idle()
	}
	// No job is left, so nothing can push: the workers may go.
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	close(d.ready)
	d.workers.Wait()
	if d.ownClient { // nobody else will: its idle connections and their janitor go too
		d.client.CloseIdleConnections()
	}
	d.target.Load().closeIdle()
	return nil
}

// receive is the loop that takes messages, one held slot each, until ctx ends or the
// consumer closes. It receives with a child of ctx that Pause ends (pause.go); while
// paused it waits for Resume.
func (d *Dispatcher) receive(ctx context.Context) {
	defer d.closeInjections()
	defer d.leaveReceive()
	var rctx context.Context // nil or ended: ask receiveContext for one
	for {
		if rctx == nil || rctx.Err() != nil {
			if ctx.Err() != nil {
				return
			}
			var resumed <-chan struct{}
			if rctx, resumed = d.receiveContext(ctx); rctx == nil {
				select { // paused: leave the messages stored
				case <-resumed:
				case <-ctx.Done():
					return
				}
				continue
			}
		}
		if err := d.held.acquire(rctx); err != nil {
			continue // ended or paused: the top of the loop tells which
		}
		msg, err := d.takeInjected(), error(nil) // Redeliver's first (dlq.go)
		injected := msg != nil
		if msg == nil {
			msg, err = d.c.Receive(rctx)
		}
		if err != nil {
			d.held.release()
			if errors.Is(err, channel.ErrClosed) || ctx.Err() != nil {
				return
			}
			if rctx.Err() != nil {
				continue // paused
			}
			d.log.Warn("receiving from the channel failed; retrying", "err", err)
			select {
			case <-rctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		d.jobs.add()
		j := newJob(msg)
		j.redriven = injected
		d.admit(j)
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
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		d.idle.Add(1)
		select {
		case j, ok := <-d.ready:
			d.idle.Add(-1)
			if !ok { // Run closed it: no job is left
				return
			}
			if !d.park(j) {
				d.process(j)
			}
		case <-idle.C:
			// Leave, unless work arrived meanwhile or this is the last worker. Under d.mu,
			// so that pushLocked either sees this worker no longer idle (and starts
			// another) or pushed before the check below (and this worker stays).
			d.mu.Lock()
			d.idle.Add(-1)
			if len(d.ready) == 0 && d.nWorkers > 1 {
				d.nWorkers--
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
	d.unparkLocked()
	for j := range d.waiting {
		if j.timer.Stop() {
			delete(d.waiting, j)
			j.timer = nil
			d.pushLocked(j)
		} // else the timer fired and wake will hand it over.
	}
}

// lagRecheck is how often Drain looks at the consumer again when it holds nothing but
// the consumer still reports messages.
const lagRecheck = 50 * time.Millisecond

// Drain stops the dispatcher for shutdown: it stops receiving once the consumer is empty
// and nothing is held, and waits for Run to return. If ctx ends first, attempts in
// progress are cancelled and every message still held is released unsettled (a durable
// channel redelivers it later; a memory channel loses it, which is counted and logged).
// A paused dispatcher (Pause) is resumed first: what it holds and what its consumer
// still stores are delivered as for any drain, until ctx ends (a memory channel would
// otherwise lose them at shutdown or on the trigger's removal).
// It returns how many messages were left undelivered. If Run has not started yet, Drain
// returns 0 at once when the consumer is empty, and otherwise waits for Run to start
// (until ctx ends, returning the consumer's length).
func (d *Dispatcher) Drain(ctx context.Context) (left int) {
	select {
	case <-d.started:
	default:
		if d.c.Len() == 0 {
			return 0 // never ran and nothing to deliver
		}
		select { // Run is presumably being started: wait for it
		case <-d.started:
		case <-d.done: // Run refused to start (invalid target)
			return d.c.Len()
		case <-ctx.Done():
			return d.c.Len() // never ran: everything is still in the channel
		}
	}
	d.Resume()
	for {
		// Woken when the jobs held reach zero; then drained if the consumer is empty too.
		wake, recheck := d.jobs.idle(), (<-chan time.Time)(nil)
		select {
		case <-wake:
			if d.c.Len() == 0 {
				d.stopRecv()
				return d.wait(ctx)
			}
			// Nothing held, but the consumer reports messages. Either the receive loop is
			// about to take them, and the count rises, or Len is a durable backend's lag,
			// which it refreshes on its own clock (cached, or polled from the cluster)
			// with no signal when it changes: look again after lagRecheck.
			wake, recheck = nil, time.After(lagRecheck)
		default:
		}
		select {
		case <-wake:
		case <-recheck:
		case <-d.done:
			return int(d.left.Load())
		case <-ctx.Done():
			d.hardStop()
			return d.wait(ctx)
		}
	}
}

// StopReceiving makes the dispatcher take no more messages from its consumer: Run
// returns once every message it holds is settled, or released when its context ends
// (Drain bounds it too). What the consumer still stores stays there, for whoever
// receives from it next. Called before Run, it makes Run receive nothing.
func (d *Dispatcher) StopReceiving() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noRecv = true
	if d.stopRecv != nil {
		d.stopRecv()
	}
}

// wait waits for Run to return, stopping it hard when ctx ends, and returns how many
// messages were released unsettled.
func (d *Dispatcher) wait(ctx context.Context) int {
	select {
	case <-d.done:
	case <-ctx.Done():
		d.hardStop()
		<-d.done
	}
	return int(d.left.Load())
}
