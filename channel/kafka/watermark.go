package kafka

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// watermark tracks the records of one assigned partition from the first one fetched and
// which of them are settled, so that only a prefix of settled records is ever committed:
// the commit offset is one past the last record of the longest settled prefix. A record
// left unsettled (released, or in flight at a crash) holds the commit back, so a restart
// delivers it again (at-least-once).
//
// So that a restart does not also deliver again the records settled after it, the commit
// carries their offset ranges in its metadata (at most maxSkipBytes; ranges that do not
// fit are left out, which only costs duplicates). The next owner of the partition skips
// them.
//
// Records are added in offset order, as a partition is fetched. A watermark is not safe
// for concurrent use; the consumer guards it with its mutex.
type watermark struct {
	// pending[head:] are the records from the first unsettled one on, in offset order;
	// first is the sequence number of pending[head].
	pending []pend
	head    int
	first   int64

	commit      int64 // next offset to consume after the settled prefix; -1: none yet
	commitEpoch int32 // leader epoch at commit
	dirty       bool  // commit or settled ranges changed since last taken

	skip [][2]int64 // inclusive offset ranges a previous owner settled, ascending
}

type pend struct {
	offset  int64
	epoch   int32
	settled bool
}

// skipPrefix marks commit metadata written by this package; maxSkipBytes bounds it
// (Kafka's offset.metadata.max.bytes defaults to 4096).
const (
	skipPrefix   = "sluice1:"
	maxSkipBytes = 3000
)

func newWatermark(skip [][2]int64) *watermark { return &watermark{commit: -1, skip: skip} }

// skipped reports whether a previous owner settled offset, dropping ranges behind it.
func (w *watermark) skipped(offset int64) bool {
	for len(w.skip) > 0 && w.skip[0][1] < offset {
		w.skip = w.skip[1:]
	}
	return len(w.skip) > 0 && w.skip[0][0] <= offset
}

// add records a fetched record. A settled one (not routed to this subscription, or
// skipped) that follows only settled ones advances the commit at once and returns -1;
// otherwise add returns the record's sequence number for settle.
func (w *watermark) add(offset int64, epoch int32, settled bool) int64 {
	if w.commit < 0 {
		w.commit, w.commitEpoch = offset, epoch
	}
	if settled && w.head == len(w.pending) {
		w.advance(offset, epoch)
		return -1
	}
	seq := w.first + int64(len(w.pending)-w.head)
	w.pending = append(w.pending, pend{offset: offset, epoch: epoch, settled: settled})
	return seq
}

// settle marks the record with sequence number seq settled and advances the commit over
// the settled prefix.
func (w *watermark) settle(seq int64) {
	i := w.head + int(seq-w.first)
	if seq < w.first || i >= len(w.pending) {
		return // already behind the watermark
	}
	w.pending[i].settled = true
	w.dirty = true
	for w.head < len(w.pending) && w.pending[w.head].settled {
		p := w.pending[w.head]
		w.advance(p.offset, p.epoch)
		w.head++
		w.first++
	}
	switch {
	case w.head == len(w.pending):
		w.pending = w.pending[:0]
		w.head = 0
	case w.head >= 1024 && w.head >= len(w.pending)/2:
		n := copy(w.pending, w.pending[w.head:])
		w.pending = w.pending[:n]
		w.head = 0
	}
}

func (w *watermark) advance(offset int64, epoch int32) {
	w.commit = offset + 1
	w.commitEpoch = epoch
	w.dirty = true
}

// take returns the commit offset, its epoch and metadata if they changed since the last
// take.
func (w *watermark) take() (offset int64, epoch int32, meta string, ok bool) {
	if !w.dirty || w.commit < 0 {
		return 0, 0, "", false
	}
	w.dirty = false
	return w.commit, w.commitEpoch, encodeSkip(w.commit, w.settledRanges()), true
}

// settledRanges returns the ranges of settled records past the commit: those tracked,
// then the inherited ones not fetched yet.
func (w *watermark) settledRanges() [][2]int64 {
	var rs [][2]int64
	last := w.commit - 1
	prevSettled := false
	for _, p := range w.pending[w.head:] {
		if p.settled {
			if prevSettled {
				rs[len(rs)-1][1] = p.offset
			} else {
				rs = append(rs, [2]int64{p.offset, p.offset})
			}
		}
		prevSettled = p.settled
		last = p.offset
	}
	for _, r := range w.skip {
		if r[0] > last {
			rs = append(rs, r)
		}
	}
	return rs
}

// encodeSkip writes ranges (ascending, all at or past commit) as commit metadata:
// skipPrefix, then base64 of uvarint pairs (gap from the previous end, length).
func encodeSkip(commit int64, rs [][2]int64) string {
	if len(rs) == 0 {
		return ""
	}
	var b []byte
	prev := commit
	for _, r := range rs {
		if base64.RawStdEncoding.EncodedLen(len(b)+20) > maxSkipBytes-len(skipPrefix) {
			break
		}
		b = binary.AppendUvarint(b, uint64(r[0]-prev))
		b = binary.AppendUvarint(b, uint64(r[1]-r[0]))
		prev = r[1]
	}
	return skipPrefix + base64.RawStdEncoding.EncodeToString(b)
}

// decodeSkip reads what encodeSkip wrote for a commit at offset commit; it returns nil
// for metadata it did not write.
func decodeSkip(commit int64, meta string) [][2]int64 {
	s, ok := strings.CutPrefix(meta, skipPrefix)
	if !ok || commit < 0 {
		return nil
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	var rs [][2]int64
	prev := commit
	for len(b) > 0 {
		gap, n := binary.Uvarint(b)
		if n <= 0 {
			return nil
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 {
			return nil
		}
		b = b[n:]
		start := prev + int64(gap)
		rs = append(rs, [2]int64{start, start + int64(l)})
		prev = start + int64(l)
	}
	return rs
}
