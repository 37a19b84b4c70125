package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// memoryOpener opens a memory channel drawing on budget for every broker that asks for
// the memory backend or none: the ChannelOpener tests give NewServer (Sluice's own is
// channel/registry's, which the broker package does not import). Other backends are not
// configured.
func memoryOpener(budget *memory.Budget) ChannelOpener {
	return func(_ context.Context, b config.Broker) (channel.Channel, error) {
		switch b.Channel {
		case config.ChannelDefault, config.ChannelMemory:
			return memory.New(memory.WithBudget(budget)), nil
		}
		return nil, fmt.Errorf("channel backend %q is not configured in this test", b.Channel)
	}
}

// newTestServer returns a server on memory channels sharing budget (64 MiB when nil),
// logging nowhere, shut down when the test ends.
func newTestServer(t testing.TB, budget *memory.Budget, opts ...Option) *Server {
	t.Helper()
	if budget == nil {
		budget = memory.NewBudget(64 << 20)
	}
	s, err := NewServer(append([]Option{WithChannelOpener(memoryOpener(budget)),
		WithLogger(discardLogger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func loadConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// brokerDoc is broker ns/b; %s takes extra metadata (", annotations: {...}").
const brokerDoc = "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: ns%s}\n"

func plainBroker() string { return fmt.Sprintf(brokerDoc, "") }

// triggerDoc is trigger ns/name of broker ns/b, for events of type typ, delivering to url.
func triggerDoc(name, typ, url string) string {
	return "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: " + name + ", namespace: ns}\n" +
		"spec: {broker: b, filter: {attributes: {type: " + typ + "}}, subscriber: {uri: \"" + url + "\"}}\n"
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
