package receive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func send(t *testing.T, r *Receiver, run string, seq uint64) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(`{}`)))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": fmt.Sprint(run, seq), "Ce-Type": "t", "Ce-Source": "s",
		"Ce-Sluicerun": run, "Ce-Sluiceseq": strconv.FormatUint(seq, 10), "Ce-Sluicesent": strconv.FormatInt(time.Now().UnixNano(), 10),
		"Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

// Receivers' reports merge by run: seen anywhere is received, seen twice is a duplicate.
func TestMergeReports(t *testing.T) {
	tests := []struct {
		name                 string
		a, b                 []uint64
		wantRecv, wantLost   uint64
		wantDups, wantEvents uint64
	}{
		{"split even/odd", []uint64{0, 2, 4, 6}, []uint64{1, 3, 5}, 7, 0, 0, 7},
		{"both see all", []uint64{0, 1, 2}, []uint64{0, 1, 2}, 3, 0, 3, 3},
		{"a gap nobody saw", []uint64{0, 1}, []uint64{3}, 3, 1, 0, 3},
		{"duplicate within one", []uint64{0, 0, 1}, []uint64{2}, 3, 0, 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reps []*Report
			for _, seqs := range [][]uint64{tt.a, tt.b} {
				r := New(Options{})
				for _, s := range seqs {
					send(t, r, "run1", s)
				}
				rep, err := r.ReportForMerge()
				if err != nil {
					t.Fatal(err)
				}
				b, err := json.Marshal(rep) // through the -o file format
				if err != nil {
					t.Fatal(err)
				}
				var back Report
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				reps = append(reps, &back)
			}
			m, err := Merge(reps)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Runs) != 1 {
				t.Fatalf("runs %+v", m.Runs)
			}
			rr := m.Runs[0]
			if rr.Received != tt.wantRecv || rr.Lost != tt.wantLost || rr.Duplicates != tt.wantDups {
				t.Errorf("run: %+v, want received %d lost %d duplicates %d", rr, tt.wantRecv, tt.wantLost, tt.wantDups)
			}
			if m.Events != tt.wantEvents || m.Duplicates != tt.wantDups || m.Lost != tt.wantLost {
				t.Errorf("totals: events %d dups %d lost %d, want %d %d %d", m.Events, m.Duplicates, m.Lost, tt.wantEvents, tt.wantDups, tt.wantLost)
			}
			if m.Latency.Count != uint64(len(tt.a)+len(tt.b))-dupsWithin(tt.a)-dupsWithin(tt.b) {
				t.Errorf("latency count %d", m.Latency.Count)
			}
		})
	}
}

func dupsWithin(seqs []uint64) uint64 {
	seen := map[uint64]bool{}
	var n uint64
	for _, s := range seqs {
		if seen[s] {
			n++
		}
		seen[s] = true
	}
	return n
}

func TestMergeRefusesReportsWithoutSets(t *testing.T) {
	r := New(Options{})
	send(t, r, "run1", 0)
	if _, err := Merge([]*Report{r.Report()}); err == nil {
		t.Error("merged a report without e2e_hist and seen sets")
	}
}
