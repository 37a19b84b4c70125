// Package httpascii holds the byte-level checks of HTTP/1.1's ASCII grammar that
// Sluice's own request parser (internal/httpserver), its delivery client (delivery) and
// its event validation (event) share, so that all of them read and write header names,
// tokens and values alike.
package httpascii

// EqualFold reports whether b equals the ASCII string s, ignoring the case of letters
// only: no other byte folds (not '[' onto '{'), and no Unicode folding (not 'ſ' onto
// 's'), unlike bytes.EqualFold.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if c|0x20 != d|0x20 || (c|0x20 < 'a' || c|0x20 > 'z') && c != d {
			return false
		}
	}
	return true
}

// ValidValue reports whether v can travel as an HTTP header value as it is: no control
// character but tab (bytes from 0x80 up, obs-text, are allowed). CR and LF are among
// them, so a value that passes cannot inject a header.
func ValidValue[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
