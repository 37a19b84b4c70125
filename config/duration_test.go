package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"PT0.2S", 200 * time.Millisecond, ""},
		{"PT0,5S", 500 * time.Millisecond, ""},
		{"PT1S", time.Second, ""},
		{"PT1M", time.Minute, ""},
		{"PT1H", time.Hour, ""},
		{"P1D", 24 * time.Hour, ""},
		{"P2W", 14 * 24 * time.Hour, ""},
		{"P1DT12H", 36 * time.Hour, ""},
		{"PT1H30M15.5S", time.Hour + 30*time.Minute + 15500*time.Millisecond, ""},
		{"PT0S", 0, ""},
		{"PT0.000000001S", time.Nanosecond, ""},
		{"PT1.5M", 90 * time.Second, ""},
		{"PT10S", 10 * time.Second, ""},
		{"", 0, "must start with P"},
		{"P", 0, "must start with P"},
		{"PT", 0, "must start with P"},
		{"1S", 0, "must start with P"},
		{"pt1s", 0, "must start with P"},
		{"P1DT", 0, "nothing after T"},
		{"P1Y", 0, "years and months"},
		{"P1M", 0, "years and months"},
		{"PT1D", 0, "unknown unit"},
		{"P1H", 0, "belongs after T"},
		{"PT1S1M", 0, "out of order"},
		{"PT1S1S", 0, "out of order"},
		{"PT1.5M1S", 0, "only the last component"},
		{"PT.S", 0, "no digits after the decimal mark"},
		{"PT1.S", 0, "no digits after the decimal mark"},
		{"PTS", 0, "expected a number"},
		{"PT-1S", 0, "expected a number"},
		{"-PT1S", 0, "must start with P"},
		{"PT1", 0, "number without a unit"},
		{"PT1X", 0, "unknown unit"},
		{"PT1S ", 0, "expected a number"},
		{"P99999999999999W", 0, "too long"},
		{"PT9223372037S", 0, "too long"},
		{"PT1H1H", 0, "out of order"},
		{"PT1HT1M", 0, "T twice"},
		{"1s", 0, "must start with P"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseDuration(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if back, err := ParseDuration(formatDuration(got)); err != nil || back != got {
				t.Errorf("round trip through %q = %v, %v", formatDuration(got), back, err)
			}
		})
	}
}
