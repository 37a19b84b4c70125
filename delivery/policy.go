package delivery

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BackoffPolicy says how the wait before a retry grows with the retry number.
type BackoffPolicy int

const (
	// Exponential waits Delay × 2^(n−1) before the n-th retry. It is Knative's default.
	Exponential BackoffPolicy = iota
	// Linear waits Delay × n before the n-th retry.
	Linear
)

// String returns the Knative spelling: "exponential" or "linear".
func (b BackoffPolicy) String() string {
	if b == Linear {
		return "linear"
	}
	return "exponential"
}

// ParseBackoffPolicy reads Knative's spelling of backoffPolicy ("linear" or "exponential",
// any case); the empty string is Exponential, Knative's default.
func ParseBackoffPolicy(s string) (BackoffPolicy, bool) {
	switch strings.ToLower(s) {
	case "", "exponential":
		return Exponential, true
	case "linear":
		return Linear, true
	}
	return Exponential, false
}

// Defaults used when a Policy field is zero.
const (
	// DefaultTimeout bounds one attempt when Policy.Timeout is zero, so that a subscriber
	// that never answers cannot hold a worker for ever. It is the same 10 s that config
	// applies to a Trigger without delivery.timeout, so a Policy built by hand behaves
	// like one loaded from a manifest.
	DefaultTimeout = 10 * time.Second
	// MaxRetryAfter caps a Retry-After wait when Policy.RetryAfterMax is zero (the field
	// absent): Knative honours the header without bound then; Sluice bounds it so that a
	// misbehaving subscriber cannot park events for days.
	MaxRetryAfter = 10 * time.Minute
	// maxWait saturates computed waits so that large retry counts cannot overflow.
	maxWait = 24 * time.Hour
	// JitterFraction is the largest share of a computed wait that jitter adds or removes.
	JitterFraction = 0.2
)

// Policy is a Knative DeliverySpec in Go form: how often and how patiently an event is
// retried, and where it goes when every attempt failed. The zero Policy makes one
// attempt, with DefaultTimeout, and has no dead-letter sink.
//
// Policy is a value; it is safe to copy and to share read-only.
type Policy struct {
	// Retry is the number of retries after the first attempt: Retry+1 attempts in all.
	// Negative counts as zero.
	Retry int
	// Backoff selects the growth of the wait between attempts.
	Backoff BackoffPolicy
	// Delay is Knative's backoffDelay, the unit of the wait between attempts. Zero retries
	// at once.
	Delay time.Duration
	// Timeout bounds each attempt (connect, send, wait for the response headers and read
	// the body). Zero means DefaultTimeout.
	Timeout time.Duration
	// RetryAfterMax caps a Retry-After wait asked for by a 429 or 503 response. Zero (the
	// field absent) caps at MaxRetryAfter; negative ignores Retry-After altogether (what
	// Knative's PT0S means — the broker maps an explicit PT0S to a negative value).
	RetryAfterMax time.Duration
	// DeadLetterSink is the URL an event goes to once every attempt failed; empty means
	// none, and such an event is logged and counted as undeliverable.
	DeadLetterSink string
}

// attempts is the total number of attempts the policy allows.
func (p Policy) attempts() int { return max(p.Retry, 0) + 1 }

// timeout is the per-attempt bound.
func (p Policy) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultTimeout
}

// Wait returns how long to wait before the retry-th retry (retry = 1 for the wait
// between the first and the second attempt), as docs/delivery.md ("Retry timing") pins it:
//
//	linear:       w = Delay × n
//	exponential:  w = Delay × 2^(n−1)
//
// then jitter: with r = rnd() uniform in [0, 1), the wait is w × (1 + 0.2 × (2r − 1)),
// that is uniform in [0.8 w, 1.2 w). A nil rnd means no jitter. Waits saturate at 24 h.
func (p Policy) Wait(retry int, rnd func() float64) time.Duration {
	if retry < 1 || p.Delay <= 0 {
		return 0
	}
	var w float64
	if p.Backoff == Linear {
		w = float64(p.Delay) * float64(retry)
	} else {
		w = float64(p.Delay) * math.Exp2(float64(min(retry-1, 62)))
	}
	if rnd != nil {
		w *= 1 + JitterFraction*(2*rnd()-1)
	}
	if w >= float64(maxWait) {
		return maxWait
	}
	return time.Duration(w)
}

// retryAfterWait applies a Retry-After value to a computed wait: the larger of the two,
// with the Retry-After part capped by RetryAfterMax (see Policy.RetryAfterMax).
func (p Policy) retryAfterWait(computed, retryAfter time.Duration) time.Duration {
	if retryAfter <= 0 || p.RetryAfterMax < 0 {
		return computed
	}
	limit := p.RetryAfterMax
	if limit == 0 {
		limit = MaxRetryAfter
	}
	retryAfter = min(retryAfter, limit)
	return max(computed, retryAfter)
}

// Retryable reports whether an attempt that ended with HTTP status code may be retried:
// 404, 408, 409, 429 and every 5xx are; other codes (400 and the rest of 4xx, 3xx) are
// not. Network errors and timeouts (status 0 here) are retryable too.
func Retryable(status int) bool {
	switch {
	case status == 0, status >= 500:
		return true
	case status == http.StatusNotFound, status == http.StatusRequestTimeout,
		status == http.StatusConflict, status == http.StatusTooManyRequests:
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header value: delay-seconds or an HTTP date. It
// returns 0 when absent, invalid or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(maxWait/time.Second) {
			return maxWait
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}
