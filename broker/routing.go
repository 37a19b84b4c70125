package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/filter"
)

// routing is the broker's routing index and how many ingests route by it now: after a
// reload swaps it, waitIdle tells when every event the old one routed is stored, so that
// the catch-up of a trigger the new one added (channel.StartFrom.Routed) ends past them.
type routing struct {
	idx      *filter.Index
	inflight atomic.Int64
}

// idlePoll is how often waitIdle looks at the count; a swap is rare, a publish short.
const idlePoll = time.Millisecond

// acquireRouting returns the broker's routing, counted in use until its release.
func (b *Broker) acquireRouting() *routing {
	for {
		rt := b.routing.Load()
		rt.inflight.Add(1)
		if b.routing.Load() == rt {
			return rt
		}
		rt.inflight.Add(-1) // swapped meanwhile: take the new one
	}
}

// release ends a use of rt that acquireRouting counted.
func (rt *routing) release() { rt.inflight.Add(-1) }

// swapRouting makes idx the broker's routing and returns the one it replaced (nil for
// the first).
func (b *Broker) swapRouting(idx *filter.Index) *routing {
	return b.routing.Swap(&routing{idx: idx})
}

// waitIdle returns once no ingest routes by rt any more (none can start to: it was
// swapped out), or when ctx ends.
func (rt *routing) waitIdle(ctx context.Context) {
	for rt != nil && rt.inflight.Load() > 0 && ctx.Err() == nil {
		time.Sleep(idlePoll)
	}
}
