package delivery

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// DefaultMaxInFlight is the concurrency toward a subscriber when Target.MaxInFlight is
// zero, and the default of `sluice serve --max-in-flight`. Workers start on demand, so
// an idle trigger holds none of them.
const DefaultMaxInFlight = 256

// Target is where one trigger (or subscription) delivers: its subscriber, optional reply
// address, delivery policy and concurrency. It is a value; Dispatcher.Update swaps it.
type Target struct {
	// Name identifies the trigger in logs and metrics, "namespace/name".
	Name string
	// URL is the subscriber's address.
	URL string
	// ReplyURL, when set (a Knative Subscription's reply.uri), receives the subscriber's
	// replies instead of the broker's Replier.
	ReplyURL string
	// Policy is the delivery policy (the Trigger's, else its Broker's).
	Policy Policy
	// Ordered delivers events sharing a partitionkey extension one at a time, in arrival
	// order, retries included (annotation kafka.eventing.knative.dev/delivery.order:
	// ordered). Events without the extension share one key, "".
	Ordered bool
	// HeaderEncoding is how ce- header values are written: event.HeaderMinimal (the
	// zero value) or event.HeaderPercent (strict percent-encoding, for subscribers that
	// decode).
	HeaderEncoding event.HeaderEncoding
	// Structured sends the target's events in structured mode: each POST (to the
	// subscriber, the reply URL and the dead-letter sink) carries the event in the JSON
	// event format, Content-Type application/cloudevents+json, instead of ce- headers
	// (a Knative DeliverySpec's format: json). Batches are JSON either way.
	Structured bool
	// CACerts, when set, are the PEM CA certificates an https subscriber is verified
	// against instead of the system's (a Knative Destination's CACerts).
	CACerts string
	// Audience, when set, is the subscriber's OIDC audience: a token for it (from the
	// dispatcher's TokenSource) is sent as Authorization: Bearer.
	Audience string
	// DeadLetterCACerts and DeadLetterAudience are the same for Policy.DeadLetterSink.
	DeadLetterCACerts, DeadLetterAudience string
	// MaxInFlight bounds the attempts in progress toward the subscriber at once; zero
	// means DefaultMaxInFlight. With adaptation on, the effective limit moves between 1
	// and MaxInFlight.
	MaxInFlight int
	// MaxDeliveryRate, when above zero, caps how often attempts to the subscriber start:
	// a token bucket of MaxDeliveryRate events a second that holds a tenth of a second of
	// them (at least one). Every attempt takes one token per event it carries, retries
	// included; an attempt waits for its tokens holding its in-flight slot (annotation
	// sluice.dev/max-delivery-rate). Zero: no cap.
	MaxDeliveryRate float64
	// Batch, when above 1, delivers up to Batch events per POST as
	// application/cloudevents-batch+json (annotation sluice.dev/delivery-batch); a 2xx
	// settles them all, a failure retries the batch, and when retries are spent each
	// event is dead-lettered on its own. See batch.go and docs/delivery.md.
	Batch int
	// BatchWait is how long a batch waits to fill before it is sent anyway
	// (sluice.dev/delivery-batch-wait); zero means DefaultBatchWait.
	BatchWait time.Duration
}

// DefaultBatchWait is Target.BatchWait when zero.
const DefaultBatchWait = 5 * time.Millisecond

func (t Target) batchWait() time.Duration {
	if t.BatchWait > 0 {
		return t.BatchWait
	}
	return DefaultBatchWait
}

func (t Target) maxInFlight() int {
	if t.MaxInFlight > 0 {
		return t.MaxInFlight
	}
	return DefaultMaxInFlight
}

// resolved is a Target with its URLs parsed once, so attempts do not parse them again.
type resolved struct {
	Target
	url, reply, dls      *url.URL
	subClient, dlsClient *http.Client // for CACerts; nil: the dispatcher's client
}

// resolve parses t's URLs and makes the clients of its CACerts, with deny checked on
// their dials.
func resolve(t Target, deny DenyList) (*resolved, error) {
	r := &resolved{Target: t}
	if t.Batch < 0 || t.BatchWait < 0 {
		return nil, fmt.Errorf("delivery: batch %d, wait %v: want 0 or more", t.Batch, t.BatchWait)
	}
	if err := validRate(t.MaxDeliveryRate); err != nil {
		return nil, err
	}
	var err error
	if r.url, err = parseURL("subscriber", t.URL); err != nil {
		return nil, err
	}
	if t.ReplyURL != "" {
		if r.reply, err = parseURL("reply", t.ReplyURL); err != nil {
			return nil, err
		}
	}
	if t.Policy.DeadLetterSink != "" {
		if r.dls, err = parseURL("deadLetterSink", t.Policy.DeadLetterSink); err != nil {
			return nil, err
		}
	}
	if t.CACerts != "" {
		if r.subClient, err = caClient(t.CACerts, deny); err != nil {
			return nil, fmt.Errorf("delivery: subscriber %w", err)
		}
	}
	if t.DeadLetterCACerts != "" {
		if r.dlsClient, err = caClient(t.DeadLetterCACerts, deny); err != nil {
			return nil, fmt.Errorf("delivery: deadLetterSink %w", err)
		}
	}
	return r, nil
}

func parseURL(what, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("delivery: %s URL: %w", what, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("delivery: %s URL %q: want an absolute http or https URL", what, s)
	}
	return u, nil
}
