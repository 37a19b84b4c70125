package httpascii

import "testing"

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		b, s string
		want bool
	}{
		{"host", "Host", true}, {"HOST", "Host", true}, {"Hosts", "Host", false},
		{"content-length", "Content-Length", true}, {"content\rlength", "Content-Length", false},
		{"content_length", "Content-Length", false}, {"Content-Lengt", "Content-Length", false},
		{"[ost", "{ost", false}, {"@", "`", false},
		{"\u017ferver", "Server", false}, {"keep-alive", "\u212aeep-alive", false},
	} {
		if got := EqualFold([]byte(tc.b), tc.s); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v, want %v", tc.b, tc.s, got, tc.want)
		}
	}
}
