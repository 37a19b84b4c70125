package overload

import (
	"strings"
	"testing"
	"time"
)

// TestOptionsValidate: the defaults and the zero value are valid; each option out of
// its range is named, with its flag.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "": valid
	}{
		{"defaults", DefaultOptions(), ""},
		{"zero", Options{}, ""},
		{"largest waits", Options{AdmitWait: 10 * time.Second, RejectHold: 10 * time.Second}, ""},
		{"negative admit wait", Options{AdmitWait: -1}, "AdmitWait (--admit-wait)"},
		{"admit wait over 10s", Options{AdmitWait: time.Minute}, "AdmitWait (--admit-wait) 1m0s: want 0 (refuse at once) up to 10s"},
		{"negative hold", Options{RejectHold: -time.Second}, "RejectHold (--reject-hold)"},
		{"hold over 10s", Options{RejectHold: time.Minute}, "RejectHold (--reject-hold) 1m0s: want 0 (off) up to 10s"},
		{"negative backlog", Options{MaxBacklog: -1}, "MaxBacklog (--max-backlog) -1: want 0 (no bound) or more"},
		{"negative storing", Options{MaxStoring: -1}, "MaxStoring (--max-storing) -1: want 0 (no bound) or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			_, nerr := New(tc.o, nil)
			switch {
			case tc.want == "" && (err != nil || nerr != nil):
				t.Fatalf("Validate: %v, New: %v; want both nil", err, nerr)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want an error with %q", err, tc.want)
			case tc.want != "" && (nerr == nil || nerr.Error() != err.Error()):
				t.Fatalf("New: %v; want Validate's error", nerr)
			}
		})
	}
}
