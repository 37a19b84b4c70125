package overload

import (
	"testing"
)

// fullRoom is a Room with no room for bytes and no backlog.
type fullRoom struct{}

func (fullRoom) Fits(int64) bool     { return false }
func (fullRoom) Backlogged(int) bool { return false }

// TestConnTurnEnter: a request comes in on room its connection holds for its broker,
// counted at its own size; room held for another broker is given back, as is room a
// connection holds when it goes idle; a connection that waited in vain makes its next
// request late, once; a connection without a turn lets nothing in.
func TestConnTurnEnter(t *testing.T) {
	ctl, err := New(DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := ctl.Gate(fullRoom{}), ctl.Gate(fullRoom{})
	tests := []struct {
		name        string
		held        *Gate
		wasLate     bool
		to          *Gate
		n           int64
		took        bool
		late        bool
		pendA       int64
		idleGivesTo int64 // pending of a after idle()
	}{
		{"same broker", a, false, a, 300, true, false, 300, 300},
		{"other broker", a, false, b, 300, false, false, 0, 0},
		{"none held", nil, false, a, 300, false, false, 0, 0},
		{"none held, late", nil, true, a, 300, false, true, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.q.pending.Store(0)
			turn := &connTurn{late: tc.wasLate}
			if tc.held != nil {
				tc.held.q.pending.Store(100)
				turn.q, turn.n = &tc.held.q, 100
			}
			if took, late := turn.enter(&tc.to.q, tc.n); took != tc.took || late != tc.late {
				t.Fatalf("enter: %v, late %v; want %v, late %v", took, late, tc.took, tc.late)
			}
			if p := a.q.pending.Load(); p != tc.pendA || turn.q != nil {
				t.Fatalf("after enter: pending %d (want %d), still held %v", p, tc.pendA, turn.q != nil)
			}
			if _, late := turn.enter(&tc.to.q, tc.n); late {
				t.Fatal("a second request is late too")
			}
			turn.idle() // nothing held any more: changes nothing
			if p := a.q.pending.Load(); p != tc.idleGivesTo {
				t.Fatalf("after idle: pending %d, want %d", p, tc.idleGivesTo)
			}
		})
	}
	var none *connTurn
	if took, late := none.enter(&a.q, 10); took || late {
		t.Errorf("no turn: %v, late %v; want neither", took, late)
	}
}
