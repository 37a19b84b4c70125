package delivery

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/redact"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// phase is what a job is trying to do.
type phase uint8

const (
	phaseDeliver    phase = iota // POST the event to the subscriber
	phaseReply                   // POST the subscriber's reply to the target's ReplyURL
	phaseDeadLetter              // POST the failed event to the dead-letter sink
	phaseStore                   // keep the failed event in the dead-letter store (dlq.go)
)

// job is one message on its way through the phases, from receipt to settlement.
type job struct {
	msg      channel.Message
	ev       *event.Event // the stored event (shared, read-only)
	reply    *event.Event // phaseReply: the reply being posted
	dls      *event.Event // phaseDeadLetter: the event with the error extensions
	key      string       // ordered: partition key
	ordered  bool
	phase    phase
	attempt  int  // attempts made in the current phase
	tries    int  // phaseStore: attempts made to the subscriber
	redriven bool // handed over by Redeliver: its message is a dead letter still stored
	received time.Time
	timer    *time.Timer
	span     trace.Span // the open attempt's span; nil with tracing off
	batch    []*job     // a batch carrier's jobs (batch.go); nil for a job of one message
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

func newJob(m channel.Message) *job {
	j := jobPool.Get().(*job)
	j.msg, j.ev, j.received = m, m.Event(), time.Now()
	return j
}

// process makes the job's next attempt, on a worker.
func (d *Dispatcher) process(j *job) {
	ctx := d.ctx
	if ctx.Err() != nil {
		if j.batch != nil {
			d.releaseBatch(j)
		} else {
			d.release(j)
		}
		return
	}
	t := d.target.Load()
	if j.batch != nil {
		d.deliverBatch(ctx, t, j)
		return
	}
	switch j.phase {
	case phaseDeliver:
		d.deliver(ctx, t, j)
	case phaseReply:
		d.postReply(ctx, t, j)
	case phaseStore:
		d.storeDead(ctx, t, j)
	default:
		d.deadLetter(ctx, t, j)
	}
}

// deliver makes one attempt to the subscriber.
func (d *Dispatcher) deliver(ctx context.Context, t *resolved, j *job) {
	tm := d.tm.Load()
	if err := d.lim.acquire(ctx); err != nil {
		d.release(j)
		return
	}
	if err := d.paced(ctx, 1); err != nil {
		d.lim.release()
		d.release(j)
		return
	}
	var th *tracing.Headers
	if d.tracer != nil {
		ctx, th = d.startAttempt(ctx, t, j, j.ev, t.url)
	}
	tm.inflight.Inc()
	var o outcome
	if authz, err := d.bearer(ctx, t.Audience, t.url); err != nil {
		o = outcome{err: err, errData: []byte(err.Error())}
	} else {
		o = send(ctx, d.clientFor(t.subClient), t.url, j.ev, t.Policy.timeout(), true, d.maxReply, t.HeaderEncoding, t.Structured, th, authz)
	}
	tm.inflight.Dec()
	d.lim.release()
	if ctx.Err() != nil { // shutdown cancelled the attempt: not the subscriber's fault
		d.release(j)
		return
	}
	now := o.end      // one clock read per attempt serves the limiter and the latency
	if now.IsZero() { // no attempt was made: the bearer token could not be had
		now = time.Now()
	}
	d.lim.observe(o.latency, o.status, o.timedOut, now)
	traceOutcome(j, &o)
	tm.attempts[destSubscriber][resultOf(o.status, o.timedOut)].Inc()
	j.attempt++
	if o.ok() {
		next, err := d.handleReply(ctx, t, j, &o)
		if err == nil {
			tm.delivered.Inc()
			tm.latency.Observe(now.Sub(j.received).Seconds())
			if next != nil {
				j.phase, j.attempt, j.reply = phaseReply, 0, next
				d.postReply(ctx, t, j)
				return
			}
			d.settle(j)
			return
		}
		// The reply could not be ingested: the delivery failed and is retried, unless the
		// channel can never store it (too large). The dead letter tells the channel's
		// reason, not the backend's own error (hosts, topics, accounts: docs/security.md);
		// handleReply logged that.
		o.errData = replyErrData(err)
		o.err, o.final = err, errors.Is(err, channel.ErrTooLarge) || errors.Is(err, errReplyTooLarge)
	}
	d.failed(ctx, t, j, &o, t.url, j.ev)
}

// postReply makes one attempt to post the reply to the target's ReplyURL.
func (d *Dispatcher) postReply(ctx context.Context, t *resolved, j *job) {
	tm := d.tm.Load()
	u := t.reply
	if u == nil { // the reply URL was removed by Update while the reply waited: ingest it
		d.ingestReply(ctx, t, j)
		return
	}
	var th *tracing.Headers
	if d.tracer != nil {
		ctx, th = d.startAttempt(ctx, t, j, j.reply, u)
	}
	var o outcome
	if authz, err := d.bearer(ctx, "", u); err != nil { // a reply URL names no audience
		o = outcome{err: err, errData: []byte(err.Error())}
	} else {
		o = send(ctx, d.client, u, j.reply, t.Policy.timeout(), false, 0, t.HeaderEncoding, t.Structured, th, authz)
	}
	if ctx.Err() != nil {
		d.release(j)
		return
	}
	traceOutcome(j, &o)
	tm.attempts[destReply][resultOf(o.status, o.timedOut)].Inc()
	j.attempt++
	if o.ok() {
		tm.replies[replyPosted].Inc()
		d.settle(j)
		return
	}
	d.failed(ctx, t, j, &o, u, j.reply)
}

// ingestReply hands a reply that was meant for a ReplyURL to the Replier instead.
func (d *Dispatcher) ingestReply(ctx context.Context, t *resolved, j *job) {
	tm := d.tm.Load()
	if d.replier == nil {
		tm.replies[replyNoReplier].Inc()
		d.log.Warn("reply dropped: no reply URL any more and no replier", "id", j.ev.ID, "reply_id", j.reply.ID)
		d.settle(j)
		return
	}
	err := d.replier(ctx, j.reply)
	if err == nil {
		tm.replies[replyIngested].Inc()
		d.settle(j)
		return
	}
	tm.replies[replyFailed].Inc()
	j.attempt++
	o := outcome{err: err, errData: []byte(err.Error())}
	d.failed(ctx, t, j, &o, t.url, j.reply)
}

// deadLetter makes one attempt to the dead-letter sink.
func (d *Dispatcher) deadLetter(ctx context.Context, t *resolved, j *job) {
	tm := d.tm.Load()
	if t.dls == nil && d.dlq != nil { // removed by Update while waiting: kept instead
		d.toStore(ctx, t, j)
		return
	}
	if t.dls == nil { // removed by Update while waiting
		d.undeliverable(j, j.dls, tm, "no dead-letter sink", false)
		return
	}
	var th *tracing.Headers
	if d.tracer != nil {
		ctx, th = d.startAttempt(ctx, t, j, j.dls, t.dls)
	}
	if d.deadLetterer != nil {
		dl := j.dls
		if th != nil { // stored with this attempt as its parent; j.dls stays the next attempt's
			dl = j.dls.Clone()
			tracing.ToEvent(ctx, dl)
		}
		err := d.deadLetterer(ctx, dl)
		if ctx.Err() != nil {
			d.release(j)
			return
		}
		traceOutcome(j, &outcome{err: err})
		j.attempt++
		if err == nil {
			tm.deadLettered.Inc()
			d.noteDeadLetter(t.Name, j.dls, "dead_lettered")
			d.log.Debug("event stored for its dead-letter sink", "id", j.ev.ID, "sink", redact.Of(t.dls))
			d.settle(j)
			return
		}
		o := outcome{err: err, errData: []byte(err.Error())}
		d.failed(ctx, t, j, &o, t.dls, j.dls)
		return
	}
	var o outcome
	if authz, err := d.bearer(ctx, t.DeadLetterAudience, t.dls); err != nil {
		o = outcome{err: err, errData: []byte(err.Error())}
	} else {
		o = send(ctx, d.clientFor(t.dlsClient), t.dls, j.dls, t.Policy.timeout(), false, 0, t.HeaderEncoding, t.Structured, th, authz)
	}
	if ctx.Err() != nil {
		d.release(j)
		return
	}
	traceOutcome(j, &o)
	tm.attempts[destDeadLetter][resultOf(o.status, o.timedOut)].Inc()
	j.attempt++
	if o.ok() {
		tm.deadLettered.Inc()
		d.noteDeadLetter(t.Name, j.dls, "dead_lettered")
		d.log.Debug("event dead-lettered", "id", j.ev.ID, "sink", redact.Of(t.dls))
		d.settle(j)
		return
	}
	d.failed(ctx, t, j, &o, t.dls, j.dls)
}

// failed handles a failed attempt to dest with ev: retry after the policy's wait, or,
// once attempts are exhausted or the failure is not retryable, move on — to the
// dead-letter sink, or to the undeliverable log.
func (d *Dispatcher) failed(ctx context.Context, t *resolved, j *job, o *outcome, dest *url.URL, ev *event.Event) {
	p := t.Policy
	tm := d.tm.Load()
	retryable := !o.final && (o.err != nil || Retryable(o.status)) // o.err: network error, timeout or reply failure
	if retryable && j.attempt < p.attempts() {
		wait := p.Wait(j.attempt, rand.Float64)
		if o.status == http.StatusTooManyRequests || o.status == http.StatusServiceUnavailable {
			wait = p.retryAfterWait(wait, o.retryAfter)
		}
		tm.retries.Inc()
		traceRetry(j, wait)
		d.schedule(j, wait)
		return
	}
	d.endAttempt(j)
	if j.phase == phaseDeadLetter {
		d.undeliverable(j, j.dls, tm, "dead-letter sink failed", true, "status", o.status, "err", o.err)
		return
	}
	if j.phase == phaseStore && j.redriven {
		d.keepStored(j, o.err)
		return
	}
	if j.phase == phaseStore {
		d.undeliverable(j, j.dls, tm, "the dead-letter store failed", false, "err", o.err)
		return
	}
	code := o.status
	if code == 0 || (o.ok() && o.err != nil) {
		code = http.StatusInternalServerError // as Knative: network error, timeout, reply failure
	}
	dl := deadLetterEvent(ev, redact.Of(dest), code, o.errData) // shown to the sink: no credentials
	if t.dls == nil && d.dlq != nil {
		j.dls = dl
		d.toStore(ctx, t, j)
		return
	}
	if t.dls == nil {
		d.undeliverable(j, dl, tm, "delivery failed and there is no dead-letter sink", false,
			"dest", redact.Of(dest), "status", o.status, "err", o.err)
		return
	}
	j.phase, j.attempt, j.dls = phaseDeadLetter, 0, dl
	d.deadLetter(ctx, t, j)
}

// undeliverable logs and counts an event that can go nowhere, then settles its message:
// never dropped without a trace.
func (d *Dispatcher) undeliverable(j *job, ev *event.Event, tm *triggerMetrics, why string, sinkFailed bool, args ...any) {
	outcome := "no_sink"
	if sinkFailed {
		tm.sinkFailed.Inc()
		outcome = "sink_failed"
	} else {
		tm.noSink.Inc()
	}
	d.noteDeadLetter(d.target.Load().Name, ev, outcome)
	code, _ := ev.Get(ExtErrorCode)
	dest, _ := ev.Get(ExtErrorDest)
	d.log.Warn("event undeliverable: "+why, append([]any{"id", ev.ID, "source", ev.Source, "type", ev.Type,
		"knativeerrordest", dest, "knativeerrorcode", code}, args...)...)
	d.settle(j)
}

// settle acks the message: it was delivered, dead-lettered or logged as undeliverable.
func (d *Dispatcher) settle(j *job) {
	d.endAttempt(j)
	if err := j.msg.Ack(); err != nil {
		d.log.Warn("ack failed; the channel may deliver the event again", "id", j.ev.ID, "err", err)
	}
	d.finish(j)
}

// keepStored releases a redriven dead letter that failed again and could not be stored
// anew: its entry stays in the store, for another redrive.
func (d *Dispatcher) keepStored(j *job, err error) {
	d.endAttempt(j)
	d.log.Warn("redriven event failed again and cannot be stored anew; it stays in the dead-letter store",
		"id", j.ev.ID, "source", j.ev.Source, "type", j.ev.Type, "err", err)
	j.msg.Release()
	d.finish(j)
}

// release gives the message back unsettled (shutdown).
func (d *Dispatcher) release(j *job) {
	d.endAttempt(j)
	tm := d.tm.Load()
	d.left.Add(1)
	if j.msg.Release() {
		tm.releasedKept.Inc()
		d.log.Info("event released unsettled at shutdown; the channel will redeliver it", "id", j.ev.ID)
	} else {
		tm.releasedLost.Inc()
		d.log.Warn("event lost at shutdown: released unsettled by a non-durable channel",
			"id", j.ev.ID, "source", j.ev.Source, "type", j.ev.Type)
	}
	d.finish(j)
}

// finish frees j's slot and starts the next job of its key.
func (d *Dispatcher) finish(j *job) {
	if j.ordered {
		if next := d.seq.done(j.key); next != nil {
			d.push(next)
		}
	}
	*j = job{}
	jobPool.Put(j)
	d.held.release()
	d.jobs.done()
}
