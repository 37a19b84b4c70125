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

// annotationStartFrom is the Trigger (and Subscription) annotation naming where a
// trigger new to its channel starts: "latest", "earliest" or an RFC 3339 time.
const annotationStartFrom = "sluice.dev/start-from"

// StartFrom is where a trigger new to its channel starts (sluice.dev/start-from). The
// zero value is "latest": the events stored after it exists.
type StartFrom struct {
	// Earliest starts at the oldest event the channel still stores.
	Earliest bool
	// Time, when not zero, starts at the events stored at or after it.
	Time time.Time
}

// Latest reports whether s is "latest", the default.
func (s StartFrom) Latest() bool { return !s.Earliest && s.Time.IsZero() }

// String is the annotation's value for s.
func (s StartFrom) String() string {
	switch {
	case s.Earliest:
		return "earliest"
	case !s.Time.IsZero():
		return s.Time.Format(time.RFC3339Nano)
	}
	return "latest"
}

// startFrom reads sluice.dev/start-from (Triggers and Subscriptions). A bad value fails
// the object, naming the annotation.
func (p *parsed) startFrom(ann map[string]string) {
	v, ok := ann[annotationStartFrom]
	if !ok {
		return
	}
	switch {
	case p.trigger == nil && p.sub == nil:
		p.fail("metadata.annotations.%s: only for Triggers and Subscriptions", annotationStartFrom)
	case v == "latest" || v == "":
	case v == "earliest":
		p.start.Earliest = true
	default:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			p.fail("metadata.annotations.%s: %q: want latest, earliest or an RFC 3339 time such as 2026-01-02T15:04:05Z", annotationStartFrom, v)
			return
		}
		p.start.Time = t
	}
}
