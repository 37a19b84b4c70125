package delivery

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// handleReply deals with what a 2xx response carried. It returns the reply to post to
// the target's ReplyURL, if any, or an error when the reply could not be ingested (the
// delivery then counts as failed and is retried). A body that is not an event, an
// invalid reply, or a reply stopped by the TTL is counted and logged; the delivery still
// counts as done.
func (d *Dispatcher) handleReply(ctx context.Context, t *resolved, j *job, o *outcome) (*event.Event, error) {
	tm := d.tm.Load()
	switch {
	case errors.Is(o.replyErr, event.ErrTooLarge):
		tm.replies[replyInvalid].Inc()
		return nil, fmt.Errorf("%w: the reply is larger than the broker accepts (%d bytes, --max-event-bytes)", errReplyTooLarge, d.maxReply)
	case o.replyErr != nil:
		tm.replies[replyInvalid].Inc()
		d.log.Warn("subscriber replied with an invalid event; reply dropped", "id", j.ev.ID, "err", o.replyErr)
		return nil, nil
	case o.reply == nil:
		if o.notEvent {
			tm.replies[replyNotEvent].Inc()
			d.log.Debug("subscriber answered 2xx with a body that is not an event", "id", j.ev.ID)
		}
		return nil, nil
	}
	r := o.reply
	ttl := ttlOf(j.ev) - 1
	if ttl <= 0 {
		tm.loopStopped.Inc()
		d.log.Warn("reply not re-ingested: knativebrokerttl ran out (event loop?)",
			"id", j.ev.ID, "reply_id", r.ID, "reply_type", r.Type)
		return nil, nil
	}
	r.Set(ExtTTL, strconv.Itoa(ttl))
	if t.reply != nil {
		if d.tracer != nil {
			if _, ok := r.Get(tracing.ExtTraceParent); !ok {
				tracing.ToEvent(ctx, r) // the attempt that got it
			}
		}
		return r, nil
	}
	if d.replier == nil {
		tm.replies[replyNoReplier].Inc()
		d.log.Warn("reply dropped: no replier configured", "id", j.ev.ID, "reply_id", r.ID)
		return nil, nil
	}
	var sp trace.Span
	if d.tracer != nil {
		ctx, sp = d.traceReply(ctx, t, r)
	}
	err := d.replier(ctx, r)
	if sp != nil {
		endSpan(sp, err)
	}
	if err != nil {
		tm.replies[replyFailed].Inc()
		err = fmt.Errorf("reply %s not ingested: %w", r.ID, err)
		d.warn.Warn("reply", "reply not ingested; the delivery fails", "id", j.ev.ID, "err", err)
		return nil, err
	}
	tm.replies[replyIngested].Inc()
	return nil, nil
}

// errReplyTooLarge fails a delivery whose reply is over the dispatcher's bound
// (WithMaxReplyBytes): no retry makes it smaller, so the event is dead-lettered.
var errReplyTooLarge = errors.New("reply too large")

// replyErrData is what a dead letter says of a reply that was not ingested: for a
// channel's error (channel.IsKind) its reason (channel.Reason), for anything else (the
// reply's own fault, such as a bad TTL) the error.
func replyErrData(err error) []byte {
	if channel.IsKind(err) {
		return []byte("reply not stored: " + channel.Reason(err))
	}
	return []byte(err.Error())
}
