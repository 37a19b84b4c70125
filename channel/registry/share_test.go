package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
)

// TestNamespaceShare: with WithNamespaceShare(0.5), the brokers of one namespace hold
// at most half the memory limit together; another namespace still has room.
func TestNamespaceShare(t *testing.T) {
	r, err := started(t, nil, WithMemoryLimit(1<<20), WithNamespaceShare(0.5))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer r.Close(ctx)
	open := func(ns, name string) channel.Channel {
		ch, err := r.Open(ctx, config.Broker{Namespace: ns, Name: name, Channel: config.ChannelMemory})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume(ctx, "sub"); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	a1, a2, b := open("a", "one"), open("a", "two"), open("b", "one")
	pub := func(ch channel.Channel, kib int) error {
		e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: make([]byte, kib<<10)}
		return ch.Publish(ctx, []channel.Envelope{{Event: e, Subscriptions: []string{"sub"}}})
	}
	if err := pub(a1, 300); err != nil {
		t.Fatal(err)
	}
	if err := pub(a2, 300); !errors.Is(err, channel.ErrFull) {
		t.Errorf("namespace a past its half: %v, want ErrFull", err)
	}
	if adm := a2.(channel.Admitter); adm.Admits(300 << 10) {
		t.Error("a2 admits 300 KiB with its namespace at 300 of its 512 KiB")
	}
	if err := pub(b, 400); err != nil {
		t.Errorf("namespace b, within its share, refused: %v", err)
	}
	if _, err := started(t, nil, WithNamespaceShare(1.5)); err == nil || !strings.Contains(err.Error(), "WithNamespaceShare(1.5)") {
		t.Errorf("share 1.5: %v", err)
	}
}
