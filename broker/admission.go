package broker

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-broker/sluice/channel"
)

// Ingress admission under overload is package overload's (docs/overload.md): each
// broker has an overload.Gate, and the broker is the gate's overload.Room. What stays
// here are the broker's answers: the 429 of a full broker and the Room's two questions.

// Fits reports whether the broker's channel can take n more bytes now: a memory
// channel's byte budget (channel.Admitter); any other channel always can. Part of
// overload.Room.
func (b *Broker) Fits(n int64) bool {
	a, ok := b.ch.(channel.Admitter)
	return !ok || a.Admits(n)
}

// Backlogged reports whether a trigger of the broker has more than limit events stored
// and not yet settled (Consumer.Len), reading the triggers as apply last left them: no
// lock, copy or sort. Part of overload.Room.
func (b *Broker) Backlogged(limit int) bool {
	var live []*trigger
	if l := b.live.Load(); l != nil {
		live = *l
	}
	for _, t := range live {
		if t.consumer.Len() > limit {
			return true
		}
	}
	return false
}

// retryAfterFull is the Retry-After of a 429: queues drain in well under a second at the
// rates Sluice runs, so clients come back soon.
const retryAfterFull = "1"

// rejectFull answers 429 with Retry-After, flushes it whole, and holds the connection
// (overload.Control.Hold), less what the request waited already, before returning.
func (s *Server) rejectFull(w http.ResponseWriter, r *http.Request, b *Broker, reason string, waited time.Duration) {
	b.m.full.Inc()
	body := "channel full: try again after Retry-After: " + reason + "\n"
	h := w.Header()
	h.Set("Retry-After", retryAfterFull)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(body))
	s.ovl.Hold(w, r, waited)
}

// ConnContext gives a connection its turn in the brokers' admission queues, for
// httpserver.WithConnContext: the context its requests carry, and the function that
// gives back room it holds when the connection goes idle or away
// (overload.Control.ConnContext).
func (s *Server) ConnContext(ctx context.Context) (context.Context, func()) {
	return s.ovl.ConnContext(ctx)
}
