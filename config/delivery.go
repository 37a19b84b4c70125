package config

import (
	"fmt"
	"time"
)

// partialDelivery is a DeliverySpec as written: nil fields are unset and fall back to
// the broker's, then to DefaultDelivery().
type partialDelivery struct {
	retry                 *int
	policy                *string
	delay, timeout, raMax *time.Duration
	deadLetterSink        *string
	dls                   *dest // deadLetterSink as written; resolved into deadLetterSink
	format                *string
}

// delivery validates a DeliverySpec at path.
func (o *parsed) delivery(path string, d *deliverySpec) partialDelivery {
	var p partialDelivery
	if d == nil {
		return p
	}
	if d.Retry != nil {
		if *d.Retry < 0 {
			o.fail("%s.retry: %d is negative", path, *d.Retry)
		}
		p.retry = d.Retry
	}
	if d.BackoffPolicy != nil {
		switch *d.BackoffPolicy {
		case BackoffLinear, BackoffExponential:
			p.policy = d.BackoffPolicy
		default:
			o.fail("%s.backoffPolicy: %q is not linear or exponential", path, *d.BackoffPolicy)
		}
	}
	dur := func(field string, s *string, positive bool) *time.Duration {
		if s == nil {
			return nil
		}
		v, err := ParseDuration(*s)
		if err != nil {
			o.fail("%s.%s: %v", path, field, err)
			return nil
		}
		if positive && v <= 0 {
			o.fail("%s.%s: must be longer than zero", path, field)
			return nil
		}
		return &v
	}
	p.delay = dur("backoffDelay", d.BackoffDelay, false)
	p.timeout = dur("timeout", d.Timeout, true)
	p.raMax = dur("retryAfterMax", d.RetryAfterMax, false)
	if d.DeadLetterSink != nil {
		p.dls = o.dest(path+".deadLetterSink", d.DeadLetterSink, true)
	}
	if d.Format != nil {
		switch *d.Format {
		case FormatBinary, FormatJSON:
			p.format = d.Format
		default:
			o.fail("%s.format: %q is not binary or json", path, *d.Format)
		}
	}
	return p
}

// over returns p with its unset fields taken from q.
func (p partialDelivery) over(q partialDelivery) partialDelivery {
	if p.retry == nil {
		p.retry = q.retry
	}
	if p.policy == nil {
		p.policy = q.policy
	}
	if p.delay == nil {
		p.delay = q.delay
	}
	if p.timeout == nil {
		p.timeout = q.timeout
	}
	if p.raMax == nil {
		p.raMax = q.raMax
	}
	if p.deadLetterSink == nil {
		p.deadLetterSink, p.dls = q.deadLetterSink, q.dls
	}
	if p.format == nil {
		p.format = q.format
	}
	return p
}

// resolve fills the remaining fields from DefaultDelivery().
func (p partialDelivery) resolve() Delivery {
	d := DefaultDelivery()
	if p.retry != nil {
		d.Retry = *p.retry
	}
	if p.policy != nil {
		d.BackoffPolicy = *p.policy
	}
	if p.delay != nil {
		d.BackoffDelay = *p.delay
	}
	if p.timeout != nil {
		d.Timeout = *p.timeout
	}
	if p.raMax != nil {
		d.RetryAfterMax = *p.raMax
	}
	if p.format != nil && *p.format == FormatJSON {
		d.Format = FormatJSON
	}
	if p.deadLetterSink != nil {
		d.DeadLetterSink = *p.deadLetterSink
		if p.dls != nil {
			d.DeadLetterSinkCACerts, d.DeadLetterSinkAudience = p.dls.caCerts, p.dls.audience
		}
	}
	return d
}

// String describes d in the config's own terms, for logs.
func (d Delivery) String() string {
	s := fmt.Sprintf("retry=%d backoffPolicy=%s backoffDelay=%s timeout=%s retryAfterMax=%s",
		d.Retry, d.BackoffPolicy, formatDuration(d.BackoffDelay), formatDuration(d.Timeout), formatDuration(d.RetryAfterMax))
	if d.DeadLetterSink != "" {
		s += " deadLetterSink=" + d.DeadLetterSink
	}
	if d.Format == FormatJSON {
		s += " format=json"
	}
	return s
}

// defaultDelivery validates the delivery of a config-br-defaults entry, written at
// where, for a Broker without spec.delivery. Knative's webhook copies deadLetterSink,
// retry, backoffPolicy and backoffDelay of it into the Broker; its other fields would
// be dropped, so they are refused, naming them.
func (o *parsed) defaultDelivery(where string, d *deliverySpec) partialDelivery {
	for _, f := range []struct {
		name string
		set  bool
	}{{"timeout", d.Timeout != nil}, {"retryAfterMax", d.RetryAfterMax != nil}, {"format", d.Format != nil}} {
		if f.set {
			o.fail("%s.%s: Knative's defaults do not give a Broker this field (only deadLetterSink, retry, backoffPolicy and backoffDelay); set it in the Broker's spec.delivery", where, f.name)
		}
	}
	c := *d
	c.Timeout, c.RetryAfterMax, c.Format = nil, nil, nil
	return o.delivery(where, &c)
}
