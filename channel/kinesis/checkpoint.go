package kinesis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// checkpoint is what a subscription has settled, per shard: the sequence number of the
// last record of the settled prefix, and whether the shard is finished (closed by a split
// or merge and read to its end, every record settled), which lets its children be read.
// It is stored as JSON in one file per subscription:
//
//	<checkpoint dir>/<stream>/<sha256(subscription)[:16]>.json
//
// written to a temporary file and renamed, so a crash leaves the old or the new one.
type checkpoint struct {
	Subscription string                `json:"subscription"`
	Shards       map[string]shardCheck `json:"shards"`
	Start        *startMark            `json:"start,omitempty"`  // a start in the past: its catch-up
	Removed      time.Time             `json:"removed,omitzero"` // when Remove removed it (kept for the retention)
}

type shardCheck struct {
	Seq  string   `json:"seq,omitempty"`  // settled up to and including this record
	Skip []string `json:"skip,omitempty"` // records after Seq settled already (at most maxSkip)
	Done bool     `json:"done,omitempty"` // closed, read to its end and all settled
}

// maxSkip bounds the settled records after a shard's unsettled one that a checkpoint
// remembers; past it, the oldest are forgotten and delivered again after a restart
// (at-least-once).
const maxSkip = 4096

// checkpointPath is where the checkpoint of sub on stream lives.
func checkpointPath(dir, stream, sub string) string {
	sum := sha256.Sum256([]byte(sub))
	return filepath.Join(dir, stream, hex.EncodeToString(sum[:8])+".json")
}

// loadCheckpoint reads the checkpoint at path; a missing file is an empty checkpoint.
func loadCheckpoint(path, sub string) (checkpoint, error) {
	cp := checkpoint{Subscription: sub, Shards: map[string]shardCheck{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("kinesis: reading checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return cp, fmt.Errorf("kinesis: checkpoint %s: %w", path, err)
	}
	if cp.Subscription != sub {
		return cp, fmt.Errorf("kinesis: checkpoint %s belongs to subscription %q, not %q", path, cp.Subscription, sub)
	}
	if cp.Shards == nil {
		cp.Shards = map[string]shardCheck{}
	}
	return cp, nil
}

// save writes cp to path atomically.
func (cp checkpoint) save(path string) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("kinesis: checkpoint dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return fmt.Errorf("kinesis: writing checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("kinesis: writing checkpoint: %w", err)
	}
	return nil
}

// removeCheckpoint deletes the checkpoint at path; a missing one is not an error.
func removeCheckpoint(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kinesis: removing checkpoint: %w", err)
	}
	return nil
}

// markRemoved marks the checkpoint of sub at path removed at now; a missing one (the
// subscription never read) is written so, empty.
func markRemoved(path, sub string, now time.Time) error {
	cp, err := loadCheckpoint(path, sub)
	if err != nil {
		return err
	}
	cp.Removed = now
	return cp.save(path)
}

// maxSweep bounds the checkpoint files one sweep reads.
const maxSweep = 10000

// sweepRemoved deletes the checkpoints of the stream's subscriptions removed longer ago
// than its retention period: their records are gone. Failures are logged; the next
// Remove tries again.
func (c *Channel) sweepRemoved(ctx context.Context) {
	ret, err := c.Retention(ctx)
	if err != nil {
		c.log.Warn("sweep", "kinesis: cannot read the stream's retention; removed checkpoints kept for now", "stream", c.stream, "err", err)
		return
	}
	dir := filepath.Join(c.cfg.checkpointDir, c.stream)
	ents, err := os.ReadDir(dir)
	if err != nil {
		c.log.Warn("sweep", "kinesis: cannot list checkpoints", "dir", dir, "err", err)
		return
	}
	for i, e := range ents {
		if i == maxSweep {
			break
		}
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var cp checkpoint
		if json.Unmarshal(b, &cp) != nil || cp.Removed.IsZero() || time.Since(cp.Removed) <= ret {
			continue
		}
		if err := removeCheckpoint(path); err != nil {
			c.log.Warn("sweep", "kinesis: cannot delete a removed checkpoint", "path", path, "err", err)
		}
	}
}
