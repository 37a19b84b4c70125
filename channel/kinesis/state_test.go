package kinesis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// TestStateStoreInLeaseTable: two replicas with one lease table share the broker's
// trigger flags: a Watch begins with the stored flags and an empty-trigger marker,
// then sees (within its poll) what the other replica sets; Get reads the latest.
// Without a lease table there is no store (channel.ErrNoStateStore).
func TestStateStoreInLeaseTable(t *testing.T) {
	table := leaseTableName()
	key := fmt.Sprintf("ns/state%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func() channel.StateStore {
		t.Helper()
		c := newLeased(t, key, table)
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.StateStore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := open(), open()
	channeltest.StateStoreShared(t, ctx, a, b)

	plain, err := kinesis.New(ctx, key, kinesis.WithAPI(kinesistest.Client(t)), kinesis.WithCheckpointDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.StateStore(ctx); !errors.Is(err, channel.ErrNoStateStore) {
		t.Errorf("without a lease table: %v; want ErrNoStateStore", err)
	}
}
