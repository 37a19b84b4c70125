package registry

import (
	"fmt"

	"github.com/sluice-broker/sluice/channel/jetstream"
)

// syncOption checks --jetstream-sync and returns the embedded server's option for it.
// An external cluster syncs as its own configuration says, so asking for always there
// is an error rather than a promise Sluice cannot keep.
func syncOption(s, natsURL string) ([]jetstream.EmbeddedOption, error) {
	sync, err := jetstream.ParseSync(s)
	if err != nil {
		return nil, fmt.Errorf("--jetstream-sync: %w", err)
	}
	if natsURL != "" {
		if sync == jetstream.SyncAlways {
			return nil, fmt.Errorf("--jetstream-sync always: the external NATS cluster at --nats-url syncs as its own configuration says (jetstream { sync_interval: always })")
		}
		return nil, nil
	}
	return []jetstream.EmbeddedOption{jetstream.WithSync(sync)}, nil
}
