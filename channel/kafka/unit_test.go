package kafka

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

func TestWatermark(t *testing.T) {
	type step struct {
		add     int64 // offset to add, or -1
		settled bool  // added settled (not routed)
		settle  int   // index into added seqs to settle, or -1
	}
	tests := []struct {
		name       string
		steps      []step
		wantCommit int64
		wantRanges [][2]int64
	}{
		{"in order", []step{{0, false, -1}, {1, false, -1}, {-1, false, 0}, {-1, false, 1}}, 2, nil},
		{"gap held back", []step{{0, false, -1}, {1, false, -1}, {2, false, -1}, {-1, false, 1}, {-1, false, 2}}, 0, [][2]int64{{1, 2}}},
		{"unrouted passes", []step{{5, true, -1}, {6, true, -1}, {7, false, -1}, {8, true, -1}}, 7, [][2]int64{{8, 8}}},
		{"out of order then head", []step{{0, false, -1}, {1, false, -1}, {2, false, -1}, {3, false, -1}, {-1, false, 2}, {-1, false, 0}}, 1, [][2]int64{{2, 2}}},
		{"holes in offsets", []step{{10, false, -1}, {12, false, -1}, {15, false, -1}, {-1, false, 1}, {-1, false, 0}}, 13, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatermark(nil)
			var seqs []int64
			for _, s := range tt.steps {
				if s.add >= 0 {
					seqs = append(seqs, w.add(s.add, 0, s.settled))
				} else {
					w.settle(seqs[s.settle])
				}
			}
			if w.commit != tt.wantCommit {
				t.Errorf("commit = %d, want %d", w.commit, tt.wantCommit)
			}
			if got := w.settledRanges(); !reflect.DeepEqual(got, tt.wantRanges) {
				t.Errorf("settled ranges = %v, want %v", got, tt.wantRanges)
			}
			o, _, meta, ok := w.take()
			if !ok || o != tt.wantCommit {
				t.Fatalf("take = %d, %v; want %d, true", o, ok, tt.wantCommit)
			}
			if got := decodeSkip(o, meta); !reflect.DeepEqual(got, tt.wantRanges) {
				t.Errorf("metadata %q decodes to %v, want %v", meta, got, tt.wantRanges)
			}
			if _, _, _, ok := w.take(); ok {
				t.Error("second take reports a change")
			}
		})
	}
}

func TestWatermarkManyStaysCompact(t *testing.T) {
	w := newWatermark(nil)
	const n = 100000
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = w.add(int64(i), 0, false)
	}
	for i := n - 1; i >= 0; i-- { // worst order: the head settles last
		w.settle(seqs[i])
	}
	if w.commit != n || len(w.pending) != 0 {
		t.Fatalf("commit %d, %d pending; want %d, 0", w.commit, len(w.pending), n)
	}
}

func TestWatermarkSkipInherited(t *testing.T) {
	w := newWatermark([][2]int64{{3, 4}, {7, 7}})
	for off := int64(2); off <= 8; off++ {
		w.add(off, 0, w.skipped(off))
	}
	// 2, 5, 6, 8 pending; 3, 4, 7 settled by the previous owner.
	if w.commit != 2 {
		t.Fatalf("commit = %d, want 2", w.commit)
	}
	if got, want := w.settledRanges(), [][2]int64{{3, 4}, {7, 7}}; !reflect.DeepEqual(got, want) {
		t.Errorf("settled ranges = %v, want %v", got, want)
	}
}

func TestSkipMetadataBounded(t *testing.T) {
	var rs [][2]int64
	for i := int64(0); i < 5000; i++ {
		rs = append(rs, [2]int64{1000 + 3*i, 1000 + 3*i + 1})
	}
	meta := encodeSkip(10, rs)
	if len(meta) > maxSkipBytes {
		t.Fatalf("metadata is %d bytes, over %d", len(meta), maxSkipBytes)
	}
	got := decodeSkip(10, meta)
	if len(got) == 0 || !reflect.DeepEqual(got, rs[:len(got)]) {
		t.Fatalf("decoded %d ranges, not a prefix of the encoded ones", len(got))
	}
	if decodeSkip(10, "someone else's metadata") != nil {
		t.Error("foreign metadata decoded")
	}
}

func sampleEvent(id string) *event.Event {
	return &event.Event{
		SpecVersion: "1.0", ID: id, Source: "/sluice/test", Type: "io.sluice.test",
		DataContentType: "application/octet-stream", DataSchema: "https://example.com/schema",
		Subject: "sub ject/é", Time: "2026-01-02T03:04:05.678Z",
		Extensions: []event.Extension{{Name: "traceparent", Value: "00-abc-def-01"}, {Name: extPartitionKey, Value: "key-" + id}, {Name: "empty", Value: ""}},
		Data:       []byte{0, 1, 2, 0xff, 'x', '\n', 0},
	}
}

func TestRecordCodec(t *testing.T) {
	tests := []struct {
		name string
		env  channel.Envelope
		key  string
	}{
		{"all attributes", channel.Envelope{Event: sampleEvent("1"), Subscriptions: []string{"a", "b"}}, "key-1"},
		{"minimal, no data", channel.Envelope{Event: &event.Event{SpecVersion: "1.0", ID: "2", Source: "s", Type: "t"}, Subscriptions: []string{"a"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r kgo.Record
			fillRecord(&r, "topic", &tt.env)
			if string(r.Key) != tt.key {
				t.Errorf("key = %q, want %q", r.Key, tt.key)
			}
			got := decodeRecord(&r)
			if !reflect.DeepEqual(got, tt.env.Event) {
				t.Errorf("decoded %+v, want %+v", got, tt.env.Event)
			}
			for _, s := range tt.env.Subscriptions {
				if !routedTo(&r, s) {
					t.Errorf("not routed to %s", s)
				}
			}
			if routedTo(&r, "c") {
				t.Error("routed to c")
			}
		})
	}
}

func TestTopicName(t *testing.T) {
	if got, want := TopicName("sluice", "demo/default"), "sluice.demo.default"; got != want {
		t.Errorf("TopicName = %q, want %q", got, want)
	}
	if got, want := TopicName("p", "a b/c:d"), "p.a_b.c_d"; got != want {
		t.Errorf("TopicName = %q, want %q", got, want)
	}
}
