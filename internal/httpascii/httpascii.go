// Package httpascii holds the byte-level comparisons of HTTP/1.1's ASCII grammar that
// Sluice's own request parser (internal/httpserver) and response reader (delivery)
// share, so that both read header names and tokens alike.
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
