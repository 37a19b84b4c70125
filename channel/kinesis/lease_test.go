package kinesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// TestPlan: which leases a replica tries to take in a round.
func TestPlan(t *testing.T) {
	l := func(shard, owner string) lease { return lease{shard: shard, owner: owner} }
	expiredB := func(x lease) bool { return x.owner == "b" }
	never := func(lease) bool { return false }
	for _, tc := range []struct {
		name    string
		ls      []lease
		expired func(lease) bool
		want    []string
	}{
		{"alone takes every free lease", []lease{l("s1", ""), l("s2", ""), l("s3", "")}, never, []string{"s1", "s2", "s3"}},
		{"second of two takes half", []lease{l("s1", "a"), l("s2", "a"), l("s3", ""), l("s4", "")}, never, []string{"s3", "s4"}},
		{"second of three takes its share", []lease{l("s1", "a"), l("s2", "b"), l("s3", ""), l("s4", ""), l("s5", ""), l("s6", "")}, never, []string{"s3", "s4"}},
		{"expired are free, their owner gone", []lease{l("s1", "b"), l("s2", "b"), l("s3", "a")}, expiredB, []string{"s1", "s2"}},
		{"alone takes every expired lease", []lease{l("s1", "b"), l("s2", "b")}, expiredB, []string{"s1", "s2"}},
		{"steal one from the most loaded", []lease{l("s1", "a"), l("s2", "a"), l("s3", "a"), l("s4", "a")}, never, []string{"s4"}},
		{"no steal at one more than me", []lease{l("s1", "a"), l("s2", "a"), l("s3", "me")}, never, nil},
		{"no steal at share", []lease{l("s1", "a"), l("s2", "b"), l("s3", "me")}, never, nil},
		{"4 over 3: steal from 2/2/0", []lease{l("s1", "a"), l("s2", "a"), l("s3", "b"), l("s4", "b")}, never, []string{"s2"}},
		{"below share takes free", []lease{l("s1", "me"), l("s2", "a"), l("s3", "")}, never, []string{"s3"}},
		{"at share takes nothing", []lease{l("s1", "me"), l("s2", "me"), l("s3", "a"), l("s4", "")}, never, nil},
		{"none", nil, never, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, x := range plan("me", tc.ls, tc.expired) {
				got = append(got, x.shard)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestObserverExpires: a lease expires once seen with the same owner and counter for the
// lease duration; a renewal (new counter) or a new owner starts the wait again.
func TestObserverExpires(t *testing.T) {
	var o observer
	t0 := time.Unix(1000, 0)
	d := 10 * time.Second
	a1 := lease{shard: "s", owner: "a", counter: 1}
	o.observe([]lease{a1}, t0)
	for _, tc := range []struct {
		name string
		seen lease
		at   time.Duration
		want bool
	}{
		{"fresh", a1, 9 * time.Second, false},
		{"unchanged for the duration", a1, 10 * time.Second, true},
		{"renewed", lease{shard: "s", owner: "a", counter: 2}, 11 * time.Second, false},
		{"renewed, then unchanged", lease{shard: "s", owner: "a", counter: 2}, 21 * time.Second, true},
		{"new owner", lease{shard: "s", owner: "b", counter: 2}, 22 * time.Second, false},
		{"free never expires", lease{shard: "s", counter: 3}, 60 * time.Second, false},
	} {
		o.observe([]lease{tc.seen}, t0.Add(tc.at))
		if got := o.expired(tc.seen, t0.Add(tc.at), d); got != tc.want {
			t.Errorf("%s: expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// newTables returns the lease table of a fresh table name as seen by replicas a and b.
func newTables(t *testing.T) (a, b *leaseTable) {
	t.Helper()
	api := kinesistest.DynamoDB(t)
	name := fmt.Sprintf("sluice-test-%d", rand.Uint32())
	a = &leaseTable{api: api, name: name, owner: "a", duration: time.Second}
	b = &leaseTable{api: api, name: name, owner: "b", duration: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.ensure(ctx); err != nil { // exists: fine
		t.Fatal(err)
	}
	return a, b
}

func one(t *testing.T, tb *leaseTable, group string) lease {
	t.Helper()
	ls, err := tb.list(context.Background(), group)
	if err != nil || len(ls) != 1 {
		t.Fatalf("list = %v, %v; want one lease", ls, err)
	}
	return ls[0]
}

// TestLeaseTakeRenewStealRelease drives two replicas' conditional writes on one lease
// against dynalite: create, take, renew, a stale take refused, checkpoint, steal, the
// old owner's writes refused, release with the checkpoint, take after release.
func TestLeaseTakeRenewStealRelease(t *testing.T) {
	a, b := newTables(t)
	ctx := context.Background()
	g := leaseGroup("stream", "ns/trigger")
	seed := shardCheck{Seq: "100", Skip: []string{"102"}}
	if err := a.create(ctx, g, "shard-0", seed); err != nil {
		t.Fatal(err)
	}
	if err := b.create(ctx, g, "shard-0", shardCheck{}); err != nil { // exists: kept
		t.Fatal(err)
	}
	free := one(t, a, g)
	if free.owner != "" || free.counter != 0 || free.check.Seq != "100" || !slices.Equal(free.check.Skip, []string{"102"}) {
		t.Fatalf("created lease = %+v, want free, counter 0, the seed checkpoint", free)
	}

	got, err := a.take(ctx, g, free)
	if err != nil || got.owner != "a" || got.counter != 1 || got.check.Seq != "100" {
		t.Fatalf("a takes: %+v, %v", got, err)
	}
	if _, err := b.take(ctx, g, free); !errors.Is(err, errLeaseLost) {
		t.Fatalf("b takes with a stale counter: %v, want errLeaseLost", err)
	}
	if err := a.renew(ctx, g, "shard-0"); err != nil {
		t.Fatal(err)
	}
	if err := b.renew(ctx, g, "shard-0"); !errors.Is(err, errLeaseLost) {
		t.Fatalf("b renews a's lease: %v, want errLeaseLost", err)
	}
	if err := a.checkpoint(ctx, g, "shard-0", shardCheck{Seq: "200"}, false); err != nil {
		t.Fatal(err)
	}
	seen := one(t, b, g)
	if seen.owner != "a" || seen.counter != 2 || seen.check.Seq != "200" || seen.check.Skip != nil {
		t.Fatalf("after renew and checkpoint: %+v", seen)
	}

	stolen, err := b.take(ctx, g, seen)
	if err != nil || stolen.owner != "b" || stolen.check.Seq != "200" {
		t.Fatalf("b steals: %+v, %v", stolen, err)
	}
	for name, err := range map[string]error{
		"renew":      a.renew(ctx, g, "shard-0"),
		"checkpoint": a.checkpoint(ctx, g, "shard-0", shardCheck{Seq: "300"}, false),
		"release":    a.checkpoint(ctx, g, "shard-0", shardCheck{Seq: "300"}, true),
	} {
		if !errors.Is(err, errLeaseLost) {
			t.Errorf("a's %s after the steal: %v, want errLeaseLost", name, err)
		}
	}
	if err := b.checkpoint(ctx, g, "shard-0", shardCheck{Seq: "250", Done: true}, true); err != nil {
		t.Fatal(err)
	}
	released := one(t, a, g)
	if released.owner != "" || released.check.Seq != "250" || !released.check.Done {
		t.Fatalf("released: %+v, want free at 250, done", released)
	}
	if _, err := a.take(ctx, g, released); err != nil {
		t.Fatalf("a takes the released lease: %v", err)
	}
	if err := a.checkpoint(ctx, g, "shard-0", released.check, true); err != nil {
		t.Fatal(err)
	}
	if err := a.removeGroup(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	if ls, err := a.list(ctx, g); err != nil || len(ls) != 0 {
		t.Fatalf("after removeGroup: %v, %v", ls, err)
	}
}

// TestLeaseExpiresAndIsTaken: b sees a's lease unrenewed for the lease duration and
// takes it; while a renews, b's observer never calls it expired.
func TestLeaseExpiresAndIsTaken(t *testing.T) {
	a, b := newTables(t)
	ctx := context.Background()
	g := leaseGroup("stream", "sub")
	if err := a.create(ctx, g, "s", shardCheck{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.take(ctx, g, one(t, a, g)); err != nil {
		t.Fatal(err)
	}
	var obs observer
	start := time.Now()
	for i := 0; i < 4; i++ { // a renews every 300 ms, over 1.2 s > the 1 s lease
		if err := a.renew(ctx, g, "s"); err != nil {
			t.Fatal(err)
		}
		l := one(t, b, g)
		obs.observe([]lease{l}, time.Now())
		if obs.expired(l, time.Now(), b.duration) {
			t.Fatalf("renewed lease called expired after %s", time.Since(start))
		}
		time.Sleep(300 * time.Millisecond)
	}
	// a stops renewing (killed): b sees the same counter for the lease duration.
	l := one(t, b, g)
	obs.observe([]lease{l}, time.Now())
	deadline := time.Now().Add(30 * time.Second)
	for !obs.expired(l, time.Now(), b.duration) {
		if time.Now().After(deadline) {
			t.Fatal("the lease never expired")
		}
		time.Sleep(100 * time.Millisecond)
		l = one(t, b, g)
		obs.observe([]lease{l}, time.Now())
	}
	if got, err := b.take(ctx, g, l); err != nil || got.owner != "b" {
		t.Fatalf("b takes the expired lease: %+v, %v", got, err)
	}
}

// TestLeaseRemoveGroupKeepsShared: removing a subscription deletes its leases only once no
// live replica owns one; before that, a replica still reading it (renewing) keeps every
// lease (and the checkpoints of the shards it does not hold).
func TestLeaseRemoveGroupKeepsShared(t *testing.T) {
	a, b := newTables(t)
	ctx := context.Background()
	g := leaseGroup("stream", "sub")
	for _, s := range []string{"s1", "s2"} {
		if err := a.create(ctx, g, s, shardCheck{Seq: "7"}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := a.list(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.take(ctx, g, ls[0]); err != nil {
		t.Fatal(err)
	}
	stop := renewing(t, a, g, ls[0].shard) // a is alive
	err = b.removeGroup(ctx, g, nil)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := a.list(ctx, g); err != nil || len(ls) != 2 {
		t.Fatalf("b removed the group while a owns a lease: %v, %v; want both leases kept", ls, err)
	}
	if err := a.checkpoint(ctx, g, ls[0].shard, shardCheck{Seq: "9"}, true); err != nil {
		t.Fatal(err)
	}
	if err := a.removeGroup(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	if ls, err := a.list(ctx, g); err != nil || len(ls) != 0 {
		t.Fatalf("after the last owner released: %v, %v; want none", ls, err)
	}
}

// renewing renews tb's lease of shard every 100 ms until the returned stop is called.
func renewing(t *testing.T, tb *leaseTable, group, shard string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sleep(ctx, 100*time.Millisecond) {
			if err := tb.renew(ctx, group, shard); err != nil && ctx.Err() == nil {
				t.Errorf("renew: %v", err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// TestLeaseRemoveGroupOwners: which owners keep a removed subscription's leases. A lease
// the removing replica still owns (its release failed) and one whose owner is gone (not
// renewed for the lease duration) do not; a live owner does; an owner not yet seen
// expired when ctx ends keeps them, and the error names it.
func TestLeaseRemoveGroupOwners(t *testing.T) {
	for _, tc := range []struct {
		name    string
		owner   string // who takes the lease: "a" or "b" (b removes)
		renew   bool   // the owner renews while b removes
		timeout time.Duration
		kept    int
		errText string
	}{
		{"own lease, release failed", "b", false, 30 * time.Second, 0, ""},
		{"owner gone", "a", false, 30 * time.Second, 0, ""},
		{"owner alive", "a", true, 30 * time.Second, 1, ""},
		{"owner not seen expired before ctx ends", "a", false, 300 * time.Millisecond, 1, "owned by a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newTables(t)
			g := leaseGroup("stream", "sub")
			ctx := context.Background()
			if err := a.create(ctx, g, "s", shardCheck{Seq: "7"}); err != nil {
				t.Fatal(err)
			}
			owner := map[string]*leaseTable{"a": a, "b": b}[tc.owner]
			if _, err := owner.take(ctx, g, one(t, owner, g)); err != nil {
				t.Fatal(err)
			}
			stop := func() {}
			if tc.renew {
				stop = renewing(t, owner, g, "s")
			}
			rctx, cancel := context.WithTimeout(ctx, tc.timeout)
			err := b.removeGroup(rctx, g, nil)
			cancel()
			stop()
			if tc.errText == "" && err != nil || tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
				t.Fatalf("removeGroup = %v, want error containing %q", err, tc.errText)
			}
			if ls, err := a.list(ctx, g); err != nil || len(ls) != tc.kept {
				t.Fatalf("after removeGroup: %v, %v; want %d leases", ls, err, tc.kept)
			}
		})
	}
}
