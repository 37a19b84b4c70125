package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/config"
)

// TestJetStreamSync: --jetstream-sync takes always or interval for the embedded server;
// any other value, or always with an external cluster (whose servers decide), is an
// error naming the flag.
func TestJetStreamSync(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string // "" = starts
	}{
		{"always", []string{"--data-dir", t.TempDir(), "--jetstream-sync", "always"}, ""},
		{"interval", []string{"--data-dir", t.TempDir(), "--jetstream-sync", "interval"}, ""},
		{"bad", []string{"--data-dir", t.TempDir(), "--jetstream-sync", "sometimes"}, `--jetstream-sync: jetstream: sync "sometimes": want "always" or "interval"`},
		{"external", []string{"--nats-url", "nats://127.0.0.1:1", "--jetstream-sync", "always"}, "--jetstream-sync always: the external NATS cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := started(t, tt.args)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			case tt.want == "":
				ch, err := r.Open(context.Background(), broker("js", config.ChannelJetStream))
				if err != nil {
					t.Fatal(err)
				}
				roundTrip(t, ch)
				if err := ch.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
