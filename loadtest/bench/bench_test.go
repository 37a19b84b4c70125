package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestRunSaysWhyTheReceiverAddressIsTaken: the README's quick start leaves a 'sluice
// receive' on 127.0.0.1:9000, where bench's own receiver listens by default; the error
// must say so and how to go on, not only "address already in use".
func TestRunSaysWhyTheReceiverAddressIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = Run(context.Background(), Options{ReceiverAddr: taken.Addr().String(), Direct: true})
	if err == nil {
		t.Fatal("Run on a taken receiver address: no error")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %q does not wrap EADDRINUSE", err)
	}
	for _, want := range []string{"--receiver-addr " + taken.Addr().String(), "sluice receive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
