package delivery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// Batched delivery (Target.Batch > 1, docs/delivery.md): events due for their first
// attempt are gathered into batches of up to Batch events, waiting at most BatchWait for
// a batch to fill, and each batch is POSTed as one application/cloudevents-batch+json
// request. A batch is one unit from then on: a 2xx settles every event in it; a failure
// retries the whole batch with the target's policy; when the retries are spent every
// event of the batch goes to the dead-letter sink on its own, as an unbatched failed
// event would. On an ordered target each key has at most one event in flight, so a batch
// holds at most one event per key and the next event of a key waits until the batch
// holding the previous one has settled: ordering per key is kept. A subscriber's reply
// to a batch is not read (its body is drained).

// ContentTypeBatch is the media type of a batch of structured CloudEvents.
const ContentTypeBatch = "application/cloudevents-batch+json"

// batcher gathers jobs into batches. Its methods are called with no dispatcher lock held.
type batcher struct {
	mu      sync.Mutex
	pending []*job
	timer   *time.Timer
	gen     uint64 // bumped at every flush, so a stale timer flushes nothing
}

// batchable reports whether j goes into a batch: a first delivery attempt on a batching
// target.
func (d *Dispatcher) batchable(j *job) bool {
	return j.phase == phaseDeliver && j.attempt == 0 && j.batch == nil && d.target.Load().Batch > 1
}

// addToBatch adds j to the batch being gathered, sending it when full, or starting the
// wait for it to fill when j is its first job.
func (d *Dispatcher) addToBatch(j *job) {
	t := d.target.Load()
	b := &d.batcher
	b.mu.Lock()
	b.pending = append(b.pending, j)
	if len(b.pending) >= t.Batch {
		full := d.takeBatchLocked()
		b.mu.Unlock()
		d.pushBatch(full)
		return
	}
	if len(b.pending) == 1 {
		gen := b.gen
		b.timer = time.AfterFunc(t.batchWait(), func() { d.flushBatch(gen) })
	}
	b.mu.Unlock()
}

// flushBatch sends the batch being gathered when its wait ends, unless it was sent
// already (a newer generation).
func (d *Dispatcher) flushBatch(gen uint64) {
	b := &d.batcher
	b.mu.Lock()
	if b.gen != gen || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	jobs := d.takeBatchLocked()
	b.mu.Unlock()
	d.pushBatch(jobs)
}

// takeBatchLocked removes the pending jobs and stops the wait. Called with b.mu held.
func (d *Dispatcher) takeBatchLocked() []*job {
	b := &d.batcher
	jobs := b.pending
	b.pending = nil
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	return jobs
}

// pushBatch makes a batch of jobs due for a worker, as one carrier job. The carrier
// holds no message of its own: it is not counted among the jobs held, and it settles or
// releases the jobs it carries. A batch of one is still a batch: a batching subscriber
// always gets the batch format.
func (d *Dispatcher) pushBatch(jobs []*job) {
	c := jobPool.Get().(*job)
	c.phase, c.batch, c.received = phaseDeliver, jobs, time.Now()
	d.pushDirect(c)
}

// deliverBatch makes one attempt to deliver the batch carried by c.
func (d *Dispatcher) deliverBatch(ctx context.Context, t *resolved, c *job) {
	tm := d.tm.Load()
	if err := d.lim.acquire(ctx); err != nil {
		d.releaseBatch(c)
		return
	}
	if err := d.paced(ctx, len(c.batch)); err != nil {
		d.lim.release()
		d.releaseBatch(c)
		return
	}
	kept := c.batch[:0] // redriven dead letters purged meanwhile are settled, not sent
	for _, j := range c.batch {
		if !d.withdrawn(ctx, j) {
			kept = append(kept, j)
		}
	}
	if c.batch = kept; len(kept) == 0 {
		d.lim.release()
		d.dropCarrier(c)
		return
	}
	tm.inflight.Inc()
	var o outcome
	if authz, err := d.bearer(ctx, t.Audience, t.url); err != nil {
		o = outcome{err: err, errData: []byte(err.Error())}
	} else {
		o = sendBatch(ctx, d.clientFor(t.subClient), t, c.batch, authz)
	}
	tm.inflight.Dec()
	d.lim.release()
	if ctx.Err() != nil {
		d.releaseBatch(c)
		return
	}
	now := time.Now() // one clock read for the limiter and every job's latency
	d.lim.observe(o.latency, o.status, o.timedOut, now)
	tm.attempts[destSubscriber][resultOf(o.status, o.timedOut)].Inc()
	c.attempt++
	if o.ok() {
		for _, j := range c.batch {
			tm.delivered.Inc()
			tm.latency.Observe(now.Sub(j.received).Seconds())
			d.settle(j)
		}
		d.dropCarrier(c)
		return
	}
	p := t.Policy
	if !o.final && (o.err != nil || Retryable(o.status)) && c.attempt < p.attempts() {
		wait := p.Wait(c.attempt, rand.Float64)
		if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
			wait = p.retryAfterWait(wait, o.retryAfter)
		}
		tm.retries.Inc()
		d.schedule(c, wait)
		return
	}
	// The retries are spent: each event fails on its own, to the dead-letter sink.
	jobs := c.batch
	d.dropCarrier(c)
	for _, j := range jobs {
		j.attempt = p.attempts() // no retries of its own: the batch had them
		d.failed(ctx, t, j, &o, t.url, j.ev)
	}
}

// releaseBatch gives every message of the batch back unsettled (shutdown).
func (d *Dispatcher) releaseBatch(c *job) {
	jobs := c.batch
	d.dropCarrier(c)
	for _, j := range jobs {
		d.release(j)
	}
}

// dropCarrier returns a carrier job to the pool; it held no slot.
func (d *Dispatcher) dropCarrier(c *job) {
	*c = job{}
	jobPool.Put(c)
}

// sendBatch POSTs the events of jobs to the target's subscriber as one batch request,
// with one attempt bounded by the policy's timeout. The knativebrokerttl extension is
// left out, as in binary mode; the response body is drained, not read for replies.
// authorization, when not empty, is the destination's audience token (never logged).
// Batches carry no trace context of their own: each event keeps its traceparent.
func sendBatch(ctx context.Context, c *http.Client, t *resolved, jobs []*job, authorization string) (o outcome) {
	bp := batchBufPool.Get().(*[]byte)
	body := append((*bp)[:0], '[')
	for i, j := range jobs {
		if i > 0 {
			body = append(body, ',')
		}
		e := j.ev
		if _, ok := e.Get(ExtTTL); ok {
			e = e.Clone()
			e.Delete(ExtTTL)
		}
		body = event.AppendJSON(body, e)
	}
	body = append(body, ']')
	reuse := false // the transport may still read the body after an error: keep it then
	defer func() {
		if reuse {
			*bp = body
			batchBufPool.Put(bp)
		}
	}()
	req, err := http.NewRequest(http.MethodPost, t.url.String(), bytes.NewReader(body))
	if err != nil {
		o.err, o.errData = err, []byte(err.Error())
		return o
	}
	req.Header.Set("Content-Type", ContentTypeBatch)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	start := time.Now()
	resp, err := roundTrip(ctx, c, req, nil, start.Add(t.Policy.timeout()))
	o.latency = time.Since(start)
	if err != nil {
		o.err = err
		o.timedOut = errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		o.final = errors.Is(err, ErrEgressDenied)
		o.errData = []byte("dispatch error: " + err.Error())
		return o
	}
	defer func() {
		resp.Body.Close()
		reuse = true
	}()
	o.status = resp.StatusCode
	if !o.ok() {
		buf := make([]byte, maxErrData)
		n, rerr := io.ReadFull(resp.Body, buf)
		if n > 0 {
			o.errData = buf[:n]
		}
		if rerr != nil {
			return o
		}
		if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
			o.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	drain(resp.Body)
	return o
}

var batchBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}
