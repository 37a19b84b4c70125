package sysmon

import (
	"slices"
	"testing"
)

func TestWithSetting(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
		ok   bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + Setting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + Setting, "A=1"}, true},
		{"other settings kept", []string{"GODEBUG=http2client=0,madvdontneed=1"}, []string{"GODEBUG=http2client=0,madvdontneed=1," + Setting}, true},
		{"user's schedtrace kept", []string{"GODEBUG=schedtrace=1000"}, []string{"GODEBUG=schedtrace=1000"}, false},
		{"opt-out kept", []string{"X=1", "GODEBUG=gctrace=1, schedtrace=0"}, []string{"X=1", "GODEBUG=gctrace=1, schedtrace=0"}, false},
		{"scheddetail is not schedtrace", []string{"GODEBUG=scheddetail=1"}, []string{"GODEBUG=scheddetail=1," + Setting}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := withSetting(tt.env)
			if ok != tt.ok || !slices.Equal(got, tt.want) {
				t.Errorf("withSetting(%q) = %q, %v; want %q, %v", tt.env, got, ok, tt.want, tt.ok)
			}
		})
	}
}
