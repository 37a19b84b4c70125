package config

import (
	"time"
)

// MaxDedupWindow bounds sluice.dev/dedup-window.
const MaxDedupWindow = 24 * time.Hour

// dedupAndPause reads sluice.dev/dedup-window (Brokers and channels: a Go duration such
// as 5m or an ISO-8601 one such as PT5M, 0 to 24h; absent or 0: off) and
// sluice.dev/paused (Triggers and Subscriptions: "true" or "false"). A bad value fails
// the object, naming the annotation.
func (p *parsed) dedupAndPause(ann map[string]string) {
	if v, ok := ann[annotationDedupWindow]; ok {
		d, err := parseWindow(v)
		switch {
		case err != nil:
			p.fail("metadata.annotations.%s: %q is not a duration such as 5m or PT5M", annotationDedupWindow, v)
		case d < 0 || d > MaxDedupWindow:
			p.fail("metadata.annotations.%s: %q: want 0 (off) up to 24h", annotationDedupWindow, v)
		case p.broker == nil && p.channel == nil:
			p.fail("metadata.annotations.%s: only for Brokers and channels", annotationDedupWindow)
		default:
			p.dedup = d
		}
	}
	if v, ok := ann[annotationPaused]; ok {
		switch {
		case p.trigger == nil && p.sub == nil:
			p.fail("metadata.annotations.%s: only for Triggers and Subscriptions", annotationPaused)
		case v == "true":
			p.paused = true
		case v == "false" || v == "":
		default:
			p.fail("metadata.annotations.%s: %q is not true or false", annotationPaused, v)
		}
	}
}

// parseWindow parses a Go duration (5m, 1h30m) or an ISO-8601 one (PT5M).
func parseWindow(v string) (time.Duration, error) {
	if len(v) > 0 && v[0] == 'P' {
		return ParseDuration(v)
	}
	return time.ParseDuration(v)
}
