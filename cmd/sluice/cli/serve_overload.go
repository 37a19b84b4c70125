package cli

import (
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/overload"
)

// overloadFlags are serve's flags of overload control (package overload,
// docs/overload.md), registered in one place.
type overloadFlags struct {
	opts overload.Options
}

func (f *overloadFlags) register(fl *pflag.FlagSet) {
	d := overload.DefaultOptions()
	fl.DurationVar(&f.opts.AdmitWait, "admit-wait", d.AdmitWait, "when the broker is full, how long a request waits for room (before its body is read) before it is answered 429 (0: refuse at once; see docs/overload.md)")
	fl.DurationVar(&f.opts.RejectHold, "reject-hold", d.RejectHold, "after a 429, how long ingress waits before reading that connection's next request (0: off; see docs/overload.md)")
	fl.IntVar(&f.opts.MaxBacklog, "max-backlog", d.MaxBacklog, "events one trigger may have stored and unsettled before ingress answers 429 (any channel; 0: no bound; see docs/overload.md)")
	fl.BoolVar(&f.opts.FixedInFlight, "fixed-in-flight", d.FixedInFlight, "keep --max-in-flight attempts in flight per trigger instead of adapting to the subscriber (AIMD)")
	fl.IntVar(&f.opts.MaxStoring, "max-storing", d.MaxStoring, "requests one broker stores at once (let in, not yet acknowledged by its channel); more wait for room like a full broker's (0: no bound; under overload an embedded JetStream: 128, Kafka: 1024; see docs/overload.md)")
}
