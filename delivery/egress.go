package delivery

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
)

// ErrEgressDenied is the error of a connection to an address the deny-list holds
// (WithDenyEgress): a delivery that meets it is not retried.
var ErrEgressDenied = errors.New("egress denied by --deny-egress")

// DenyList is a list of networks deliveries may not connect to (WithDenyEgress). It is
// also the flag.Value of `sluice serve --deny-egress`: a comma-separated list of CIDR
// prefixes, such as 169.254.0.0/16,fd00:ec2::254/128. A plain address stands for itself
// alone (/32 or /128).
type DenyList []netip.Prefix

// String returns the list as Set reads it.
func (l *DenyList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Set adds the comma-separated prefixes of v; an empty v adds nothing.
func (l *DenyList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil && !strings.Contains(f, "/") {
			// A plain address stands for itself alone.
			var a netip.Addr
			if a, err = netip.ParseAddr(f); err == nil && a.Zone() != "" {
				err = fmt.Errorf("zone %q not allowed", a.Zone())
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return fmt.Errorf("%q: want a CIDR prefix such as 169.254.0.0/16 or an address: %w", f, err)
		}
		*l = append(*l, p.Masked())
	}
	return nil
}

// Type names the value in pflag's help.
func (*DenyList) Type() string { return "CIDR,..." }

// denied returns the prefix holding a, if any. An IPv4-mapped IPv6 address is checked as
// the IPv4 address it maps, and an IPv6 zone is ignored.
func (l DenyList) denied(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap().WithZone("")
	for _, p := range l {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// control is the net.Dialer's Control: it runs on the address being dialed, after name
// resolution, so a name that resolves (or later re-resolves) to a denied address is
// refused too.
func (l DenyList) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot check address %q", ErrEgressDenied, address)
	}
	if p, ok := l.denied(ap.Addr()); ok {
		return fmt.Errorf("%w: %s is in %s", ErrEgressDenied, ap.Addr().WithZone(""), p)
	}
	return nil
}

// denyListOf is the deny-list of c's transport when it is NewClient's, else none.
func denyListOf(c *http.Client) DenyList {
	if t, ok := c.Transport.(*transport); ok {
		return t.deny
	}
	return nil
}
