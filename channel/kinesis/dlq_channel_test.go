package kinesis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

// TestDLQStoreSharedInLeaseTable: replicas of one broker with one lease table, and a
// channel opened again (a restarted process), share the broker's dead letters.
func TestDLQStoreSharedInLeaseTable(t *testing.T) {
	key, table := uniqueKey(t), leaseTableName()
	dlqtest.Shared(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		c := newLeased(t, key, table)
		t.Cleanup(func() { _ = c.Close() })
		s, err := c.DLQStore(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Durable() {
			t.Fatal("the store in the lease table says it is not durable")
		}
		return s
	})
}

// TestDLQStoreNeedsLeaseTable: without a lease table there is no store
// (channel.ErrNoDLQStore: the broker keeps it in memory); bad limits are refused naming
// the flag.
func TestDLQStoreNeedsLeaseTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := kinesis.New(ctx, uniqueKey(t), kinesis.WithAPI(kinesistest.Client(t)), kinesis.WithCheckpointDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.DLQStore(ctx, dlq.DefaultLimits()); !errors.Is(err, channel.ErrNoDLQStore) {
		t.Errorf("without a lease table: %v; want ErrNoDLQStore", err)
	}
	c := newLeased(t, uniqueKey(t), leaseTableName())
	defer c.Close()
	if _, err := c.DLQStore(ctx, dlq.Limits{MaxEntries: 0, MaxBytes: 1, MaxAge: time.Hour}); err == nil || err.Error() != "--dlq-max-entries 0: want at least 1" {
		t.Errorf("limits with no entries: %v; want an error naming --dlq-max-entries", err)
	}
}
