package load

import "testing"

func TestShareOf(t *testing.T) {
	tests := []struct {
		hits      uint64
		index, of int
		want      uint64
	}{
		{10, 0, 1, 10},
		{10, 0, 0, 10},
		{10, 0, 3, 4}, // 0 3 6 9
		{10, 1, 3, 3}, // 1 4 7
		{10, 2, 3, 3}, // 2 5 8
		{2, 2, 3, 0},
		{3, 2, 3, 1},
		{0, 0, 3, 0},
	}
	for _, tt := range tests {
		if got := shareOf(tt.hits, tt.index, tt.of); got != tt.want {
			t.Errorf("shareOf(%d, %d, %d) = %d, want %d", tt.hits, tt.index, tt.of, got, tt.want)
		}
	}
}
