package config

import (
	"math"
	"strconv"
)

// Bounds of sluice.dev/max-delivery-rate, in events a second. Below the minimum a token
// would take more than a quarter of an hour; above the maximum the cap means nothing.
const (
	MinDeliveryRate = 0.001
	MaxDeliveryRate = 1e6
)

// MaxParallelism bounds rabbitmq.eventing.knative.dev/parallelism, as Knative's webhook
// does (1 to 1000).
const MaxParallelism = 1000

// annotationParallelism is eventing-rabbitmq's Trigger annotation: how many events its
// dispatcher delivers at once. Sluice reads it as sluice.dev/max-in-flight.
const annotationParallelism = "rabbitmq.eventing.knative.dev/parallelism"

// Caps are a trigger's own delivery caps.
type Caps struct {
	// Rate is sluice.dev/max-delivery-rate: the trigger's delivery attempts start at most
	// this many times a second (a token bucket, docs/caps.md); 0: no cap.
	Rate float64
	// InFlight is sluice.dev/max-in-flight (or rabbitmq.eventing.knative.dev/parallelism): at most this many delivery attempts of the
	// trigger are in flight at once, the ceiling of its adaptive in-flight limit (the
	// server's --max-in-flight stays the ceiling of both); 0: the server's alone.
	InFlight int
}

// capAnnotations reads a Trigger's sluice.dev/max-delivery-rate (a number of events a
// second from MinDeliveryRate to MaxDeliveryRate) and sluice.dev/max-in-flight (a whole
// number from 1), or instead of the latter eventing-rabbitmq's
// rabbitmq.eventing.knative.dev/parallelism (1 to MaxParallelism). A bad value, one on
// another kind, or both in-flight annotations, fails the object, naming the annotation.
func (p *parsed) capAnnotations(ann map[string]string) {
	var c Caps
	if v, ok := ann[annotationMaxDelivery]; ok {
		r, err := strconv.ParseFloat(v, 64)
		switch {
		case p.trigger == nil:
			p.fail("metadata.annotations.%s: only for Triggers", annotationMaxDelivery)
		case err != nil || math.IsNaN(r) || r < MinDeliveryRate || r > MaxDeliveryRate:
			p.fail("metadata.annotations.%s: %q is not a number of events a second from %g to %g", annotationMaxDelivery, v, MinDeliveryRate, MaxDeliveryRate)
		default:
			c.Rate = r
		}
	}
	if v, ok := ann[annotationMaxInFlight]; ok {
		n, err := strconv.Atoi(v)
		switch {
		case p.trigger == nil:
			p.fail("metadata.annotations.%s: only for Triggers", annotationMaxInFlight)
		case err != nil || n < 1:
			p.fail("metadata.annotations.%s: %q is not a whole number of at least 1", annotationMaxInFlight, v)
		default:
			c.InFlight = n
		}
	}
	if v, ok := ann[annotationParallelism]; ok {
		n, err := strconv.Atoi(v)
		switch {
		case p.trigger == nil:
			p.fail("metadata.annotations.%s: only for Triggers", annotationParallelism)
		case err != nil || n < 1 || n > MaxParallelism:
			p.fail("metadata.annotations.%s: %q is not a whole number from 1 to %d", annotationParallelism, v, MaxParallelism)
		case c.InFlight != 0:
			p.fail("metadata.annotations.%s: give it or %s, not both", annotationParallelism, annotationMaxInFlight)
		default:
			c.InFlight = n
		}
	}
	if p.trigger != nil {
		p.trigger.caps = c
	}
}
