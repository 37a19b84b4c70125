package overload

import (
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// room is a Room whose answers the test sets.
type room struct {
	fits       atomic.Bool
	backlogged atomic.Bool
	asked      atomic.Int64 // Backlogged calls
}

func (r *room) Fits(int64) bool { return r.fits.Load() }
func (r *room) Backlogged(int) bool {
	r.asked.Add(1)
	return r.backlogged.Load()
}

// TestGateAdmit: a request is let in at once while the broker's channel fits it, no
// trigger is over MaxBacklog and fewer than MaxStoring are storing; otherwise, with
// AdmitWait 0, it is refused. Every admission counts as storing until Done.
func TestGateAdmit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       Options
		fits       bool
		backlogged bool
		storing    int // admissions held before the request
		want       bool
	}{
		{"room", Options{}, true, false, 0, true},
		{"channel full", Options{}, false, false, 0, false},
		{"backlogged, no bound", Options{}, true, true, 0, true},
		{"backlogged, bound", Options{MaxBacklog: 5}, true, true, 0, false},
		{"storing under the bound", Options{MaxStoring: 2}, true, false, 1, true},
		{"storing at the bound", Options{MaxStoring: 2}, true, false, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctl, err := New(tc.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			rm := &room{}
			rm.fits.Store(true)
			g := ctl.Gate(rm)
			r := httptest.NewRequest("POST", "/ns/b", nil)
			held := make([]Admission, tc.storing)
			for i := range held {
				var ok bool
				if held[i], _, ok = g.Admit(r, 100, time.Now()); !ok {
					t.Fatalf("admission %d before the request refused", i)
				}
			}
			rm.fits.Store(tc.fits)
			rm.backlogged.Store(tc.backlogged)
			a, waited, ok := g.Admit(r, 100, time.Now().Add(time.Second)) // a fresh backlog verdict
			if ok != tc.want || waited {
				t.Fatalf("Admit: ok %v, waited %v; want ok %v, not waited", ok, waited, tc.want)
			}
			if want := int64(tc.storing) + map[bool]int64{true: 1}[ok]; g.Storing() != want {
				t.Errorf("Storing %d, want %d", g.Storing(), want)
			}
			a.Done()
			a.Done() // twice: gives back nothing more
			for i := range held {
				held[i].Done()
			}
			if g.Storing() != 0 || g.Waiting() != 0 {
				t.Errorf("after Done: storing %d, waiting %d; want none", g.Storing(), g.Waiting())
			}
		})
	}
}

// TestGateBacklogMeasuredOnce: within backlogEvery of a measurement the verdict is the
// cached one; the broker is asked again only after it.
func TestGateBacklogMeasuredOnce(t *testing.T) {
	ctl, err := New(Options{MaxBacklog: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rm := &room{}
	g := ctl.Gate(rm)
	now := time.Now()
	for i := range 10 {
		g.overBacklog(now.Add(time.Duration(i) * backlogEvery / 20))
	}
	if n := rm.asked.Load(); n != 1 {
		t.Fatalf("asked %d times within backlogEvery, want once", n)
	}
	rm.backlogged.Store(true)
	if !g.overBacklog(now.Add(2 * backlogEvery)) {
		t.Fatal("a fresh verdict did not see the backlog")
	}
	if n := rm.asked.Load(); n != 2 {
		t.Fatalf("asked %d times, want twice", n)
	}
}

// TestRate: the bucket holds a second of events; a batch over it can never be taken,
// one that finds the bucket empty is told how long to wait, at least a second.
func TestRate(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		perSec     float64
		first      int // taken first
		n          int
		ok         bool
		retryLeast time.Duration
	}{
		{"within the bucket", 10, 0, 10, true, 0},
		{"more than the bucket holds", 10, 0, 11, false, 0},
		{"bucket empty", 10, 10, 5, false, time.Second},
		{"slow rate", 0.5, 1, 1, false, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRate(tc.perSec)
			if tc.first > 0 {
				if ok, _ := r.Take(tc.first, now); !ok {
					t.Fatal("first take refused")
				}
			}
			ok, retry := r.Take(tc.n, now)
			if ok != tc.ok || retry < tc.retryLeast || (tc.retryLeast == 0 && retry != 0) {
				t.Fatalf("Take(%d): %v, retry %v; want %v, retry at least %v", tc.n, ok, retry, tc.ok, tc.retryLeast)
			}
		})
	}
	ctl, _ := New(Options{}, nil)
	g := ctl.Gate(&room{})
	g.SetRate(5)
	r := g.Rate()
	g.SetRate(5)
	if g.Rate() != r {
		t.Error("an unchanged rate got a new bucket")
	}
	if g.SetRate(0); g.Rate() != nil {
		t.Error("rate 0 kept a bucket")
	}
}
