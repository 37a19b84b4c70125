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

func TestValidValue(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"", true}, {"text/plain; charset=utf-8", true}, {"a\tb", true}, {"caf\xc3\xa9 \xff", true},
		{"a\r\nX-Evil: 1", false}, {"a\nb", false}, {"a\x00", false}, {"\x1f", false}, {"a\x7fb", false},
	} {
		if got := ValidValue(tc.v); got != tc.want {
			t.Errorf("ValidValue(%q) = %v, want %v", tc.v, got, tc.want)
		}
		if got := ValidValue([]byte(tc.v)); got != tc.want {
			t.Errorf("ValidValue([]byte(%q)) = %v, want %v", tc.v, got, tc.want)
		}
	}
}
