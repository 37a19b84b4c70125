package delivery

import (
	"net/http"
	"testing"
	"time"
)

func TestPolicyWait(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		p     Policy
		retry int
		want  time.Duration
	}{
		{"linear 1", Policy{Backoff: Linear, Delay: 100 * ms}, 1, 100 * ms},
		{"linear 3", Policy{Backoff: Linear, Delay: 100 * ms}, 3, 300 * ms},
		{"exponential 1", Policy{Backoff: Exponential, Delay: 100 * ms}, 1, 100 * ms},
		{"exponential 2", Policy{Backoff: Exponential, Delay: 100 * ms}, 2, 200 * ms},
		{"exponential 4", Policy{Backoff: Exponential, Delay: 100 * ms}, 4, 800 * ms},
		{"exponential saturates", Policy{Backoff: Exponential, Delay: time.Second}, 200, maxWait},
		{"no delay", Policy{Delay: 0}, 3, 0},
		{"retry 0", Policy{Delay: time.Second}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Wait(tc.retry, nil); got != tc.want {
				t.Errorf("Wait(%d) = %v, want %v", tc.retry, got, tc.want)
			}
			// Jitter stays within ±20%: r = 0 gives −20%, r → 1 gives +20%.
			lo, hi := tc.p.Wait(tc.retry, func() float64 { return 0 }), tc.p.Wait(tc.retry, func() float64 { return 0.999999 })
			if tc.want < maxWait {
				if d := float64(tc.want) * 0.8; float64(lo) < d-1 || float64(lo) > d+1 {
					t.Errorf("lowest jitter %v, want %v", lo, time.Duration(d))
				}
				if d := float64(tc.want) * 1.2; float64(hi) > d+1 || float64(hi) < d*0.9999 {
					t.Errorf("highest jitter %v, want about %v", hi, time.Duration(d))
				}
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	for code, want := range map[int]bool{
		0: true, 200: false, 301: false, 400: false, 401: false, 403: false, 404: true, 408: true,
		409: true, 410: false, 413: false, 422: false, 429: true, 500: true, 502: true, 503: true, 504: true,
	} {
		if got := Retryable(code); got != want {
			t.Errorf("Retryable(%d) = %v, want %v", code, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"1", time.Second}, {" 120 ", 2 * time.Minute}, {"-3", 0}, {"soon", 0},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
	for _, tc := range []struct {
		max, computed, ra, want time.Duration
	}{
		{0, 100 * time.Millisecond, time.Second, time.Second},                                 // larger replaces
		{0, 2 * time.Second, time.Second, 2 * time.Second},                                    // smaller ignored
		{500 * time.Millisecond, 100 * time.Millisecond, time.Second, 500 * time.Millisecond}, // capped
		{-1, 100 * time.Millisecond, time.Second, 100 * time.Millisecond},                     // disabled
		{0, 0, time.Hour, MaxRetryAfter},                                                      // default cap
	} {
		p := Policy{RetryAfterMax: tc.max}
		if got := p.retryAfterWait(tc.computed, tc.ra); got != tc.want {
			t.Errorf("max %v: retryAfterWait(%v, %v) = %v, want %v", tc.max, tc.computed, tc.ra, got, tc.want)
		}
	}
}
