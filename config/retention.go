package config

import "time"

// annotationRetention is the Broker annotation naming how long its durable channel keeps
// events once stored, delivered or not (replay reads them back).
const annotationRetention = "sluice.dev/retention"

// MaxRetention bounds sluice.dev/retention: a year.
const MaxRetention = 366 * 24 * time.Hour

// retention reads sluice.dev/retention (Brokers and channels: a Go duration such as 168h
// or an ISO-8601 one such as P7D, from 1m up to MaxRetention). A bad value fails the
// object, naming the annotation.
func (p *parsed) retention(ann map[string]string) {
	v, ok := ann[annotationRetention]
	if !ok {
		return
	}
	d, err := parseWindow(v)
	switch {
	case err != nil:
		p.fail("metadata.annotations.%s: %q is not a duration such as 168h or P7D", annotationRetention, v)
	case d < time.Minute || d > MaxRetention:
		p.fail("metadata.annotations.%s: %q: want 1m up to %s", annotationRetention, v, MaxRetention)
	case p.broker == nil && p.channel == nil:
		p.fail("metadata.annotations.%s: only for Brokers and channels", annotationRetention)
	default:
		p.keep = d
	}
}
