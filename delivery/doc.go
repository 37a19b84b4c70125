// Package delivery is Sluice's dispatcher: it takes the messages of one trigger (or
// subscription) from a channel consumer and delivers them to the subscriber under the
// Knative delivery contract, settling every message only once its outcome is final.
//
// # Attempts
//
// Each attempt is a binary-mode HTTP POST: every attribute and extension as a ce- header
// (event.EachHeader, with the target's HeaderEncoding), the body the event's data
// unchanged, plus "Prefer: reply". The knativebrokerttl extension is stripped. A
// Target with Structured (Knative's DeliverySpec format: json) sends the event in the
// JSON event format as the body instead (Content-Type application/cloudevents+json, no
// ce- headers), to its subscriber, reply URL and dead-letter sink alike. Each
// attempt is bounded by Policy.Timeout. To an http:// subscriber the headers are written
// straight into the request's bytes; other transports get them on a header map
// (BenchmarkAttemptRequest compares the two).
//
// # Retries
//
// A Policy (Knative's DeliverySpec) allows Retry+1 attempts. The n-th retry waits
// Delay×n (linear) or Delay×2^(n−1) (exponential), ±20% uniform jitter (Policy.Wait).
// A 429 or 503 with Retry-After (seconds or HTTP date) replaces the wait when larger,
// capped by RetryAfterMax. Retried: network errors, timeouts, 404, 408, 409, 429, 5xx
// (Retryable). Not retried: 400, other 4xx and 3xx — they go straight to the dead-letter
// sink. A retry waits on a timer and holds no worker.
//
// # Dead letters
//
// After the last attempt the event goes to Policy.DeadLetterSink with the extensions
// knativeerrordest (the URL that failed), knativeerrorcode (its last status; 500 when no
// response came, as Knative does) and knativeerrordata (at most 1024 bytes of the
// response body, base64). The sink is retried with the same policy. An event the sink
// refuses, or one failing with no sink configured, is logged with its id and counted
// (undeliverable_total). In every case the message is then Acked.
//
// # Replies
//
// A 2xx carrying a CloudEvent (binary or structured) is a reply, its body at most
// WithMaxReplyBytes (a larger one fails the delivery for good: dead-lettered). Its
// knativebrokerttl is the delivered event's minus one (255 when absent or larger); at
// zero it is dropped, counted
// (loop_stopped_total) and logged. Otherwise it goes to the target's ReplyURL (POSTed
// with the same policy, dead-lettered like an event when that fails) or to the Replier,
// which re-ingests it into the broker. A Replier error fails the delivery, which is then
// retried. A 2xx whose body is not an event is counted; the delivery is done.
//
// # Ordering and bounds
//
// An ordered Target delivers the events that share a partitionkey extension one at a
// time in arrival order, retries included; keys proceed in parallel; events without the
// extension share one key. An unordered target delivers up to the in-flight limit at
// once. Workers make the attempts: they start on demand, one per attempt in flight up
// to the in-flight limit (MaxInFlight, default DefaultMaxInFlight), and leave after a
// while idle, so a quiet trigger holds no goroutine. At most MaxInFlight + MaxPending
// messages are held (see WithMaxPending), after which the dispatcher stops receiving:
// memory stays bounded.
//
// A Target's MaxDeliveryRate caps how often attempts to the subscriber start: a token
// bucket (pacer.go) from which every attempt, retries included, takes one token per
// event once it holds its in-flight slot.
//
// # Connections
//
// NewClient's transport keeps HTTP/1.1 keep-alive connections per http:// subscriber
// host (https:// ones negotiate HTTP/2 when offered; a Target's CACerts get a client of
// their own, and its Audience a bearer token from WithTokenSource), at
// most DefaultMaxConnsPerHost open to one host (shared by the triggers delivering there;
// a request beyond waits for a connection), closes those idle for DefaultIdleTimeout,
// and closes a retired trigger's idle ones at once (CloseIdleTo). Informational (1xx)
// responses are skipped; redirects are not followed (a 3xx is a failed attempt). A
// response head over MaxResponseHeaderBytes or MaxResponseHeaderFields is a failed
// attempt, read no further than the bound. WithDenyEgress refuses connections to the
// networks of a DenyList, checked on the address dialed: such a delivery is not retried.
//
// # Adaptive concurrency
//
// With WithAdaptive(true) (the default) the in-flight limit toward a subscriber follows
// an AIMD rule: it halves (at most once per round trip) on 429/502/503/504, timeouts or
// a latency climb, and grows by one per round trip while the subscriber is healthy, so a
// sink under autoscaling gets fewer errors. The maths is on overload.InFlight, which the limiter applies, and in
// docs/delivery.md.
//
// # Settlement and shutdown
//
// A message is Acked only after its final outcome (delivered, dead-lettered, or logged
// as undeliverable). On shutdown (Drain's deadline or Run's context) the messages still
// held are Released: a durable channel delivers them again, a memory channel loses them,
// which is logged and counted (released_total{redelivered="false"}).
package delivery
