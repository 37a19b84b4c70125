package cli

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/sluice-broker/sluice/delivery"
)

// checkDenyOwnIngress refuses a --deny-egress list holding the address of Sluice's own
// ingress, listenAddr (127.0.0.1 when it listens on all interfaces): the deliveries
// to its own brokers and channels (Sequences, Parallels, Subscriptions, replies) go to
// that address, and would all fail and be dead-lettered.
func checkDenyOwnIngress(deny delivery.DenyList, listenAddr string) error {
	if len(deny) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", listenAddr, err)
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.IsUnspecified() {
		a = netip.MustParseAddr("127.0.0.1") // where refs to Sluice's own objects point (ingressBaseURL)
	}
	a = a.Unmap().WithZone("")
	for _, p := range deny {
		if p.Contains(a) {
			return fmt.Errorf("--deny-egress %s holds %s, the address of Sluice's own ingress (--addr %s): every delivery to its own brokers and channels (Sequences, Parallels, Subscriptions) would fail and be dead-lettered; leave it out of the list",
				p, a, listenAddr)
		}
	}
	return nil
}
