package event

import "bytes"

// jsonScanner walks JSON text that json.Valid has accepted, splitting it into raw values
// without decoding them: the structured and batch parsers read an event's members in
// one pass, in order, duplicates included, and keep data byte for byte. The text being
// valid, it checks nothing and never runs past the end. encoding/json's Decoder could
// do the same (Token, then Decode into a json.RawMessage), at the cost of several
// allocations per member, one of them an error value it makes and drops at the end of
// every value; FuzzJSONScanner holds the two to the same split.
type jsonScanner struct {
	b []byte
	i int // the next byte to read
}

// space skips white space.
func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (s *jsonScanner) peek() byte {
	s.space()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// more moves to the next member or element of the object or array being read, past its
// ',', and reports whether there is one; at the closing byte end it moves past it and
// reports false. Call it after the opening '{' or '[', and after each member or element.
func (s *jsonScanner) more(end byte) bool {
	if s.peek() == ',' {
		s.i++
	}
	if s.peek() == end {
		s.i++
		return false
	}
	return true
}

// colon moves past the ':' after a member's name.
func (s *jsonScanner) colon() {
	s.space()
	s.i++
}

// value returns the raw value at the next byte after white space and moves past it.
func (s *jsonScanner) value() []byte {
	s.space()
	start := s.i
	switch s.b[s.i] {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				break
			}
		}
	default: // a number, true, false or null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.b[start:s.i]
			}
			s.i++
		}
	}
	return s.b[start:s.i]
}

// str moves past the string starting at the next byte (a '"').
func (s *jsonScanner) str() {
	s.i++
	for {
		j := bytes.IndexByte(s.b[s.i:], '"')
		// The quote ends the string unless an odd run of backslashes escapes it.
		k := s.i + j
		n := 0
		for k-n-1 >= s.i && s.b[k-n-1] == '\\' {
			n++
		}
		s.i = k + 1
		if n%2 == 0 {
			return
		}
	}
}
