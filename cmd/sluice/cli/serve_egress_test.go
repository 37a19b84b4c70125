package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/delivery"
)

// TestDenyEgressOwnIngress: a --deny-egress list holding the address of Sluice's own
// ingress is refused, naming both; a list that does not hold it is accepted.
func TestDenyEgressOwnIngress(t *testing.T) {
	for _, tt := range []struct {
		deny, addr string
		want       string // "" for accepted
	}{
		{"127.0.0.0/8", "127.0.0.1:8080", "--deny-egress 127.0.0.0/8 holds 127.0.0.1, the address of Sluice's own ingress (--addr 127.0.0.1:8080)"},
		{"169.254.0.0/16,127.0.0.1", "[::]:8080", "--deny-egress 127.0.0.1/32 holds 127.0.0.1, the address of Sluice's own ingress (--addr [::]:8080)"},
		{"127.0.0.0/8", "0.0.0.0:8080", "holds 127.0.0.1"},
		{"::1", "[::1]:8080", "--deny-egress ::1/128 holds ::1"},
		{"169.254.0.0/16,fd00:ec2::254/128", "[::]:8080", ""},
		{"127.0.0.2/32", "127.0.0.1:8080", ""},
		{"10.0.0.0/8", "10.1.2.3:8080", "holds 10.1.2.3"},
	} {
		t.Run(tt.deny+"@"+tt.addr, func(t *testing.T) {
			var deny delivery.DenyList
			if err := deny.Set(tt.deny); err != nil {
				t.Fatal(err)
			}
			err := checkDenyOwnIngress(deny, tt.addr)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// Through the command: serve refuses to start (the timeout only bounds a serve
	// that would start).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr lockedBuffer
	code := Execute(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--deny-egress", "127.0.0.0/8"}, &lockedBuffer{}, &stderr)
	if want := "--deny-egress 127.0.0.0/8 holds 127.0.0.1, the address of Sluice's own ingress"; code == 0 || !strings.Contains(stderr.String(), want) {
		t.Fatalf("serve --deny-egress 127.0.0.0/8: exit %d, stderr %q; want an error containing %q", code, stderr.String(), want)
	}
}
