package kafka

import (
	"context"
	"time"
)

// openConsumers returns the consumers open now.
func (c *Channel) openConsumers() []*consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks := make([]*consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		ks = append(ks, k)
	}
	return ks
}

// refreshLag updates every open consumer's lag each LagInterval until Close.
func (c *Channel) refreshLag() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.lagInterval)
	defer t.Stop()
	for {
		select {
		case <-c.life.Done():
			return
		case <-t.C:
		}
		ks := c.openConsumers()
		if len(ks) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.lagInterval+5*time.Second)
		unhook := context.AfterFunc(c.life, cancel) // Close ends the requests in flight
		c.updateLag(ctx, ks)
		unhook()
		cancel()
	}
}

// updateLag sets each consumer's lag (per partition, the end offset less the further of
// the group's committed offset, the consumer's settled position and the log start) and
// its unfetched count (the same, measured from the consumer's fetch position where it has
// fetched the partition).
func (c *Channel) updateLag(ctx context.Context, ks []*consumer) {
	// Read before the end offsets: a record produced while they are listed is then
	// counted twice until the next refresh (an overestimate), never missed.
	produced := c.produced.Load()
	ends, err := c.adm.ListEndOffsets(ctx, c.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.log.Warn("lag", "kafka: cannot list end offsets for consumer lag", "topic", c.topic, "err", err)
		return
	}
	starts, err := c.adm.ListStartOffsets(ctx, c.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		c.log.Warn("lag", "kafka: cannot list start offsets for consumer lag", "topic", c.topic, "err", err)
		return
	}
	for _, k := range ks {
		committed, err := c.adm.FetchOffsets(ctx, k.group)
		if err != nil {
			c.log.Warn("lag", "kafka: cannot fetch committed offsets for consumer lag", "group", k.group, "err", err)
			continue
		}
		local, fetched, count := k.positions()
		var lag, unfetched int64
		for p, end := range ends[c.topic] {
			pos := int64(0)
			if s, ok := starts.Lookup(c.topic, p); ok {
				pos = s.Offset
			}
			if o, ok := committed.Lookup(c.topic, p); ok && o.Err == nil && o.At > pos {
				pos = o.At
			}
			if o, ok := local[p]; ok && o > pos {
				pos = o
			}
			if end.Offset > pos {
				lag += end.Offset - pos
			}
			if f, ok := fetched[p]; ok && f > pos {
				pos = f
			}
			if end.Offset > pos {
				unfetched += end.Offset - pos
			}
		}
		k.lag.Store(lag)
		k.setUnread(unfetched, produced, count)
	}
}
