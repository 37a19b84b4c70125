package config

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// ParseDuration parses an ISO-8601 duration as Knative's delivery fields use them:
// P[nW][nD][T[nH][nM][nS]], for example PT0.2S, PT1M, P1D or P1DT12H. Each number is
// a non-negative decimal; only the last component may have a fraction ("." or ","),
// resolved to the nanosecond. Years and months are rejected (they have no fixed length),
// as are negative durations, an empty P or T part, repeated or out-of-order components,
// and durations that overflow time.Duration.
func ParseDuration(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration such as PT0.2S or PT1M: %s", s, why)
	}
	if len(s) < 3 || s[0] != 'P' {
		return bad("must start with P and have at least one component")
	}
	var (
		total     float64
		exact     int64 // total in nanoseconds, kept exactly while it fits
		inTime    bool
		last      = -1 // rank of the last component, to enforce order
		fracSeen  bool
		anyInPart bool
	)
	units := map[byte]struct {
		rank int
		d    time.Duration
		time bool
	}{
		'W': {0, 7 * 24 * time.Hour, false},
		'D': {1, 24 * time.Hour, false},
		'H': {2, time.Hour, true},
		'M': {3, time.Minute, true},
		'S': {4, time.Second, true},
	}
	i := 1
	for i < len(s) {
		if s[i] == 'T' {
			if inTime {
				return bad("T twice")
			}
			inTime, anyInPart = true, false
			i++
			if i == len(s) {
				return bad("nothing after T")
			}
			continue
		}
		if fracSeen {
			return bad("only the last component may have a fraction")
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		intPart := s[start:i]
		fracPart := ""
		if i < len(s) && (s[i] == '.' || s[i] == ',') {
			i++
			fs := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			fracPart = s[fs:i]
			if fracPart == "" {
				return bad("no digits after the decimal mark")
			}
			fracSeen = true
		}
		if intPart == "" && fracPart == "" {
			return bad(fmt.Sprintf("expected a number at offset %d", start))
		}
		if i == len(s) {
			return bad("number without a unit")
		}
		c := s[i]
		i++
		if !inTime && (c == 'Y' || c == 'M') {
			return bad("years and months have no fixed length; use weeks or days")
		}
		u, ok := units[c]
		if !ok || u.time != inTime {
			if ok && !inTime {
				return bad(fmt.Sprintf("%c belongs after T", c))
			}
			return bad(fmt.Sprintf("unknown unit %q", c))
		}
		if u.rank <= last {
			return bad("components out of order or repeated")
		}
		last, anyInPart = u.rank, true
		var n int64
		for _, d := range intPart {
			n = n*10 + int64(d-'0')
			if n > math.MaxInt64/int64(time.Second) {
				return bad("too long")
			}
		}
		nanos := n * int64(u.d)
		if n != 0 && nanos/n != int64(u.d) {
			return bad("too long")
		}
		// The fraction, to the nanosecond of the unit.
		if fracPart != "" {
			scale := int64(u.d)
			for _, d := range fracPart {
				scale /= 10
				nanos += int64(d-'0') * scale
				if scale == 0 {
					break
				}
			}
		}
		total += float64(nanos)
		exact += nanos
		if total > math.MaxInt64 || exact < 0 {
			return bad("too long")
		}
	}
	if !anyInPart {
		return bad("nothing after T")
	}
	return time.Duration(exact), nil
}

// formatDuration writes d in ISO-8601 form, the inverse of ParseDuration for docs and
// messages.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	s := "PT"
	if h := d / time.Hour; h > 0 {
		s += fmt.Sprintf("%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		s += fmt.Sprintf("%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		s += strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
	}
	return s
}
