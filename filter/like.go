package filter

import (
	"strings"

	cesql "github.com/cloudevents/sdk-go/sql/v2"
	"github.com/cloudevents/sdk-go/sql/v2/utils"
	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// MaxLikePattern bounds the bytes of a CESQL LIKE pattern (after unquoting): a longer
// one is a configuration error naming the trigger's filter. Matching costs the value's
// length times at most MaxLikePattern/64 machine words, whatever the pattern.
const MaxLikePattern = 1024

// likeExpression is CESQL's "value LIKE 'pattern'": '%' matches any run of bytes, '_'
// any one byte, "\%" and "\_" a literal '%' and '_'; every other byte, a backslash
// before anything else included, itself. It is the sdk's LIKE (same casts, same errors,
// '_' one byte as the sdk has it) with a matcher linear in the value instead of one that
// backtracks.
type likeExpression struct {
	child   cesql.Expression
	pattern *likePattern
}

// Evaluate casts the child's value to a string and matches it.
func (l *likeExpression) Evaluate(e cloudevents.Event) (any, error) {
	v, err := l.child.Evaluate(e)
	if err != nil {
		return false, err
	}
	v, err = utils.Cast(v, cesql.StringType)
	if err != nil {
		return false, err
	}
	return l.pattern.match(v.(string)), nil
}

// likePattern is a LIKE pattern cut at its '%' into segments: without a '%', the value
// must match the one segment exactly; with some, the first segment is matched at the
// start, the last at the end, and those between are found left to right, each at its
// leftmost place after the previous one (which leaves the most room for the rest, so a
// match exists if and only if this finds one).
type likePattern struct {
	exact       bool        // no '%': first is the whole pattern
	first, last likeSegment // anchored at the start and at the end
	middle      []likeSegment
	min         int // bytes of value the segments need
}

// likeSegment is a run of pattern without '%': literal bytes, some of which ('_') match
// any byte.
type likeSegment struct {
	b   string // the bytes; at wildcard positions a placeholder
	any []bool // any[i]: b[i] matches any byte; nil: no wildcard
	// masks are the shift-and tables of a segment with wildcards, words per byte value:
	// bit j of masks[c*words+j/64] is set when position j matches byte c.
	masks []uint64
	words int
}

// compileLike reads a pattern.
func compileLike(p string) *likePattern {
	var segs []likeSegment
	var b strings.Builder
	var any []bool
	cut := func() {
		s := likeSegment{b: b.String()}
		for _, a := range any {
			if a {
				s.any = any
				break
			}
		}
		s.prepare()
		segs = append(segs, s)
		b.Reset()
		any = nil
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p) && (p[i+1] == '%' || p[i+1] == '_'):
			i++
			b.WriteByte(p[i])
			any = append(any, false)
		case c == '%':
			cut()
		case c == '_':
			b.WriteByte('_')
			any = append(any, true)
		default:
			b.WriteByte(c)
			any = append(any, false)
		}
	}
	cut()
	lp := &likePattern{first: segs[0], last: segs[len(segs)-1]}
	if len(segs) == 1 {
		lp.exact = true
		lp.min = len(lp.first.b)
		return lp
	}
	for _, s := range segs[1 : len(segs)-1] {
		if len(s.b) > 0 {
			lp.middle = append(lp.middle, s)
		}
	}
	for _, s := range segs {
		lp.min += len(s.b)
	}
	return lp
}

// prepare builds the shift-and tables of a segment with wildcards.
func (s *likeSegment) prepare() {
	if s.any == nil {
		return
	}
	s.words = (len(s.b) + 63) / 64
	s.masks = make([]uint64, 256*s.words)
	for j := 0; j < len(s.b); j++ {
		bit := uint64(1) << (j % 64)
		if s.any[j] {
			for c := range 256 {
				s.masks[c*s.words+j/64] |= bit
			}
			continue
		}
		s.masks[int(s.b[j])*s.words+j/64] |= bit
	}
}

// at reports whether s matches v at offset i (v holds len(s.b) bytes from there).
func (s *likeSegment) at(v string, i int) bool {
	if s.any == nil {
		return v[i:i+len(s.b)] == s.b
	}
	for j := 0; j < len(s.b); j++ {
		if !s.any[j] && v[i+j] != s.b[j] {
			return false
		}
	}
	return true
}

// find returns the leftmost offset in v[from:to] where s matches, or -1: with
// strings.Index for a literal segment, by shift-and (one pass over the bytes, a word of
// state per 64 bytes of segment) for one with wildcards.
func (s *likeSegment) find(v string, from, to int) int {
	n := len(s.b)
	if to-from < n {
		return -1
	}
	if s.any == nil {
		if i := strings.Index(v[from:to], s.b); i >= 0 {
			return from + i
		}
		return -1
	}
	last := uint64(1) << ((n - 1) % 64)
	if s.words == 1 {
		var d uint64
		for i := from; i < to; i++ {
			d = (d<<1 | 1) & s.masks[int(v[i])]
			if d&last != 0 {
				return i - n + 1
			}
		}
		return -1
	}
	d := make([]uint64, s.words)
	for i := from; i < to; i++ {
		m := s.masks[int(v[i])*s.words:]
		carry := uint64(1)
		for k := range d {
			next := d[k] >> 63
			d[k] = (d[k]<<1 | carry) & m[k]
			carry = next
		}
		if d[s.words-1]&last != 0 {
			return i - n + 1
		}
	}
	return -1
}

// match reports whether v matches the pattern.
func (p *likePattern) match(v string) bool {
	if p.exact {
		return len(v) == len(p.first.b) && p.first.at(v, 0)
	}
	if len(v) < p.min || !p.first.at(v, 0) {
		return false
	}
	end := len(v) - len(p.last.b)
	if !p.last.at(v, end) {
		return false
	}
	pos := len(p.first.b)
	for i := range p.middle {
		s := &p.middle[i]
		at := s.find(v, pos, end)
		if at < 0 {
			return false
		}
		pos = at + len(s.b)
	}
	return true
}
