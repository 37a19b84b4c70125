package memory

import "testing"

// TestBudgetShare: a share is bounded by its own limit and its parent's; what it
// reserves counts in the parent, and its release frees both.
func TestBudgetShare(t *testing.T) {
	root := NewBudget(100)
	a, b := root.Share(60), root.Share(60)
	if !a.reserve(60) || a.reserve(1) {
		t.Fatal("share a: want 60 bytes and not one more")
	}
	if root.Used() != 60 || !b.fits(40) || b.fits(41) {
		t.Fatalf("root used %d; b fits 40 %v, 41 %v: want 60, true, false", root.Used(), b.fits(40), b.fits(41))
	}
	if !b.reserve(40) || b.reserve(1) || root.Used() != 100 || b.Used() != 40 {
		t.Fatalf("share b: used %d, root %d", b.Used(), root.Used())
	}
	a.release(60)
	if root.Used() != 40 || a.Used() != 0 || !b.reserve(20) || b.reserve(1) {
		t.Fatalf("after a's release: root %d, a %d, b %d", root.Used(), a.Used(), b.Used())
	}
	if s := root.Share(500); s.Limit() != 100 {
		t.Errorf("a share larger than its parent: limit %d, want 100", s.Limit())
	}
}
