package jetstream

import "fmt"

// Sync is when the embedded server forces what it stored to the disk (fsync). It decides
// which failures an acknowledged event (a 202) survives; see docs/reliability.md.
type Sync string

// The sync policies of the embedded server.
const (
	// SyncInterval is NATS's default: a message is written to the operating system's page
	// cache before it is acknowledged and fsynced every two minutes. An acknowledged event
	// survives the process dying (kill -9), not a power loss or kernel crash.
	SyncInterval Sync = "interval"
	// SyncAlways fsyncs every write before the acknowledgement (NATS's sync_always): an
	// acknowledged event also survives a power loss or kernel crash of the machine, at
	// the cost of one fsync per publish batch.
	SyncAlways Sync = "always"
)

// ParseSync reads a Sync from its name ("always" or "interval").
func ParseSync(s string) (Sync, error) {
	switch Sync(s) {
	case SyncInterval, SyncAlways:
		return Sync(s), nil
	}
	return "", fmt.Errorf("jetstream: sync %q: want %q or %q", s, SyncAlways, SyncInterval)
}

// WithSync sets when the embedded server fsyncs (default SyncInterval). An external
// cluster's servers decide this in their own configuration (jetstream { sync_interval:
// always }).
func WithSync(s Sync) EmbeddedOption { return func(c *embeddedConfig) { c.sync = s } }
