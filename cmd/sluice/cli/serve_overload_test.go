package cli

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/overload"
)

// TestOverloadFlags: serve's overload flags fill overload.Options, with its defaults
// when not given.
func TestOverloadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want overload.Options
	}{
		{"defaults", nil, overload.DefaultOptions()},
		{"every flag", []string{"--admit-wait", "0", "--reject-hold", "1s", "--max-backlog", "5000", "--max-storing", "128", "--fixed-in-flight"},
			overload.Options{RejectHold: time.Second, MaxBacklog: 5000, MaxStoring: 128, FixedInFlight: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f overloadFlags
			fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			f.register(fl)
			if err := fl.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if f.opts != tc.want {
				t.Fatalf("options %+v, want %+v", f.opts, tc.want)
			}
		})
	}
}
