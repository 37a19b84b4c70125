package config

import (
	"strconv"
	"time"
)

// maxBatch bounds sluice.dev/delivery-batch: larger batches hold too many events per
// request for a retry of the whole batch to stay cheap.
const maxBatch = 1000

// batchAnnotations reads a Trigger's batched-delivery annotations:
// sluice.dev/delivery-batch (events per POST, 1 to 1000; 1 or absent: no batching) and
// sluice.dev/delivery-batch-wait (an ISO-8601 duration such as PT5MS, at most PT1S;
// absent: the default). A bad value fails the object, naming the annotation.
func (p *parsed) batchAnnotations(ann map[string]string) (n int, wait time.Duration) {
	if v, ok := ann[annotationBatch]; ok {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > maxBatch {
			p.fail("metadata.annotations.%s: %q is not a whole number from 1 to %d", annotationBatch, v, maxBatch)
			n = 0
		}
	}
	if v, ok := ann[annotationBatchWait]; ok {
		d, err := ParseDuration(v)
		switch {
		case err != nil:
			p.fail("metadata.annotations.%s: %v", annotationBatchWait, err)
		case d <= 0 || d > time.Second:
			p.fail("metadata.annotations.%s: %q: want more than 0 and at most PT1S", annotationBatchWait, v)
		default:
			wait = d
		}
	}
	return n, wait
}
