package bytesize

import "testing"

func TestSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		str  string
		bad  bool
	}{
		{in: "1048576", want: 1 << 20, str: "1MiB"},
		{in: "64MiB", want: 64 << 20, str: "64MiB"},
		{in: "512KiB", want: 512 << 10, str: "512KiB"},
		{in: "2GiB", want: 2 << 30, str: "2GiB"},
		{in: "1MB", want: 1000000, str: "1000000"},
		{in: "16M", want: 16 << 20, str: "16MiB"},
		{in: "100", want: 100, str: "100"},
		{in: " 8 MiB ", want: 8 << 20, str: "8MiB"},
		{in: "0", bad: true},
		{in: "-1MiB", bad: true},
		{in: "lots", bad: true},
		{in: "1.5MiB", bad: true},
		{in: "9000000000GiB", bad: true}, // overflows int64
	}
	for _, tt := range tests {
		var b Size
		err := b.Set(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("%q accepted as %d", tt.in, b)
			}
			continue
		}
		if err != nil || int64(b) != tt.want || b.String() != tt.str {
			t.Errorf("%q: got %d (%s), %v; want %d (%s)", tt.in, b, b.String(), err, tt.want, tt.str)
		}
	}
}
