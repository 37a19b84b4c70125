package kinesis

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// dlqTable returns a lease table of its own on the DynamoDB-compatible server.
func dlqTable(t *testing.T) *leaseTable { return dlqTableB(t) }

func dlqTableB(t testing.TB) *leaseTable {
	t.Helper()
	lt := &leaseTable{api: kinesistest.DynamoDB(t), name: fmt.Sprintf("sluice-dlq-test-%d", rand.Uint32()), owner: "a", duration: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lt.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return lt
}

// newTestDLQ returns a store of a stream of its own in lt.
func newTestDLQ(lt *leaseTable, lim dlq.Limits) *dlqStore {
	return newDLQStore(lt, fmt.Sprintf("stream-%d", rand.Uint32()), lim, ratelog.New(slog.New(slog.DiscardHandler)))
}

func TestDLQStore(t *testing.T) {
	lt := dlqTable(t)
	dlqtest.Run(t, func(t *testing.T, lim dlq.Limits) dlq.Store { return newTestDLQ(lt, lim) })
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func listIDs(t *testing.T, s dlq.Store, trigger string) (string, dlq.Page) {
	t.Helper()
	p, err := s.List(testCtx(t), trigger, 0, dlq.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	ids := ""
	for _, e := range p.Entries {
		ids += e.Event.ID + ","
	}
	return ids, p
}

// items returns the range keys of the items of trigger's entries.
func items(t *testing.T, s *dlqStore, trigger string) []string {
	t.Helper()
	out, err := s.t.api.Query(testCtx(t), &dynamodb.QueryInput{
		TableName: aws.String(s.t.name), KeyConditionExpression: aws.String("#g = :g"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: s.group(trigger)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range out.Items {
		keys = append(keys, it[attrShard].(*types.AttributeValueMemberS).Value)
	}
	return keys
}

// TestDLQStoreEvictsByAge runs the store on a clock of its own: an entry past
// --dlq-max-age is never listed, is deleted by the next listing from the start or
// store, and is reported as evicted by the next store.
func TestDLQStoreEvictsByAge(t *testing.T) {
	ctx := testCtx(t)
	s := newTestDLQ(dlqTable(t), dlq.Limits{MaxEntries: 10, MaxBytes: 1 << 20, MaxAge: time.Hour})
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	put := func(id string) int {
		n, err := s.Put(ctx, "ns/a", dlqtest.Entry(id, 1))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put("old")
	clock = clock.Add(30 * time.Minute)
	put("mid")
	clock = clock.Add(45 * time.Minute) // "old" is 75 minutes old now
	if p, err := s.List(ctx, "ns/a", 1, 10); err != nil || len(p.Entries) != 1 || p.Entries[0].Event.ID != "mid" {
		t.Fatalf("a listing after the first id lists %+v (%v); want mid alone", p.Entries, err)
	}
	if ids, p := listIDs(t, s, "ns/a"); ids != "mid," || p.Total != 1 {
		t.Fatalf("listed %q, total %d; want mid alone", ids, p.Total)
	}
	if n := len(items(t, s, "ns/a")); n != 1 {
		t.Fatalf("the table holds %d items of the trigger after the listing; want 1 (old deleted)", n)
	}
	clock = clock.Add(time.Hour)
	if n := put("new"); n != 2 {
		t.Fatalf("put evicted %d; want 2 (old, expired while listing, and mid)", n)
	}
	if ids, p := listIDs(t, s, "ns/a"); ids != "new," || p.Total != 1 {
		t.Fatalf("listed %q, total %d; want new alone", ids, p.Total)
	}
}

// TestDLQStoreLargeEntry: an entry larger than a DynamoDB item (400 KB) is stored in
// parts, listed whole, and deleted with its parts.
func TestDLQStoreLargeEntry(t *testing.T) {
	ctx := testCtx(t)
	s := newTestDLQ(dlqTable(t), dlq.DefaultLimits())
	big := dlqtest.Entry("big", 1000<<10)
	for i := range big.Event.Data {
		big.Event.Data[i] = byte(i * 7)
	}
	if _, err := s.Put(ctx, "ns/a", dlqtest.Entry("small", 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "ns/a", big); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "ns/a", dlqtest.Entry("after", 10)); err != nil {
		t.Fatal(err)
	}
	if n := len(items(t, s, "ns/a")); n != 2+4 {
		t.Fatalf("%d items; want 6 (a 1000 KiB entry in 4 parts of at most %d bytes, and 2 small ones)", n, dlqPart)
	}
	ids, p := listIDs(t, s, "ns/a")
	if ids != "small,big,after," || p.Total != 3 {
		t.Fatalf("listed %q of %d; want small,big,after", ids, p.Total)
	}
	if got := p.Entries[1].Event.Data; string(got) != string(big.Event.Data) {
		t.Fatalf("the large entry came back with %d bytes of data, not the %d stored", len(got), len(big.Event.Data))
	}
	// A page after the first entry starts at the large one, not at its parts.
	if q, err := s.List(ctx, "ns/a", p.Entries[0].ID, 1); err != nil || len(q.Entries) != 1 || q.Entries[0].Event.ID != "big" || q.Next != p.Entries[1].ID {
		t.Fatalf("page after %d: %+v, next %d (%v); want big, next %d", p.Entries[0].ID, q.Entries, q.Next, err, p.Entries[1].ID)
	}
	if q, err := s.List(ctx, "ns/a", p.Entries[1].ID, 10); err != nil || len(q.Entries) != 1 || q.Entries[0].Event.ID != "after" {
		t.Fatalf("page after the large one: %+v (%v); want after alone", q.Entries, err)
	}
	if err := s.Delete(ctx, "ns/a", p.Entries[1].ID); err != nil {
		t.Fatal(err)
	}
	if n := len(items(t, s, "ns/a")); n != 2 {
		t.Fatalf("%d items after deleting the large entry; want 2", n)
	}
	if _, p := listIDs(t, s, "ns/a"); p.Total != 2 || p.Bytes != p.Entries[0].Size()+p.Entries[1].Size() {
		t.Fatalf("total %d, bytes %d after the delete; want the 2 small ones", p.Total, p.Bytes)
	}
}

// TestDLQStoreCountersMendThemselves: items deleted behind the store's back (a TTL on
// the table, or a crash between an entry's delete and its count) leave the counters
// above what the table holds, and an entry written and not counted (a crash between the
// two) leaves them below: a listing that reads the whole list sets them again, and a
// store that runs out of older entries to evict does too, so the bounds are kept to
// the entries really held.
func TestDLQStoreCountersMendThemselves(t *testing.T) {
	ctx := testCtx(t)
	s := newTestDLQ(dlqTable(t), dlq.Limits{MaxEntries: 3, MaxBytes: 1 << 20, MaxAge: time.Hour})
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/a", dlqtest.Entry(fmt.Sprint(i), 10)); err != nil {
			t.Fatal(err)
		}
	}
	// Two entries vanish as a TTL would delete them.
	for _, k := range items(t, s, "ns/a")[:2] {
		if _, err := s.t.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.t.name), Key: s.t.key(s.group("ns/a"), k)}); err != nil {
			t.Fatal(err)
		}
	}
	// A store finds 4 counted, past the bound of 3: before evicting a live dead letter it
	// sets the counters from the items (2 held), and evicts nothing.
	n, err := s.Put(ctx, "ns/a", dlqtest.Entry("3", 10))
	if err != nil || n != 0 {
		t.Fatalf("put: evicted %d (%v); want 0", n, err)
	}
	if m, _ := s.meta(ctx, "ns/a"); m.n != 2 {
		t.Fatalf("the counters hold %d entries after the store; want 2", m.n)
	}
	// One more fits: nothing is evicted for entries that are not there.
	if n, err := s.Put(ctx, "ns/a", dlqtest.Entry("4", 10)); err != nil || n != 0 {
		t.Fatalf("put 4: evicted %d (%v); want 0", n, err)
	}
	// An entry written and not counted: a listing from the start counts it.
	id, err := s.reserve(ctx, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	e := dlqtest.Entry("uncounted", 10)
	e.Time = time.Now()
	if err := s.write(ctx, "ns/a", id, &e, e.Size()); err != nil {
		t.Fatal(err)
	}
	if ids, p := listIDs(t, s, "ns/a"); ids != "2,3,4,uncounted," || p.Total != 4 {
		t.Fatalf("listed %q, total %d; want 2,3,4,uncounted and 4", ids, p.Total)
	}
	if m, _ := s.meta(ctx, "ns/a"); m.n != 4 {
		t.Fatalf("the counters hold %d entries after the listing; want 4", m.n)
	}
	if n, err := s.Put(ctx, "ns/a", dlqtest.Entry("6", 10)); err != nil || n != 2 {
		t.Fatalf("put into 4 held, bound 3: evicted %d (%v); want 2", n, err)
	}
	if ids, _ := listIDs(t, s, "ns/a"); ids != "4,uncounted,6," {
		t.Fatalf("listed %q; want 4,uncounted,6", ids)
	}
}

// TestDLQStoreCountersTooHighEvictNoLive: items gone without their counter moving (as
// DynamoDB's TTL deletes them) do not make the store keep fewer dead letters than its
// bound: stores at the bound set the counters from the items before evicting a live one.
func TestDLQStoreCountersTooHighEvictNoLive(t *testing.T) {
	ctx := testCtx(t)
	s := newTestDLQ(dlqTable(t), dlq.Limits{MaxEntries: 5, MaxBytes: 1 << 20, MaxAge: time.Hour})
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/a", dlqtest.Entry(fmt.Sprint("a", i), 10)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range items(t, s, "ns/a")[:2] {
		if _, err := s.t.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.t.name), Key: s.t.key(s.group("ns/a"), k)}); err != nil {
			t.Fatal(err)
		}
	}
	evicted := 0
	for i := range 17 {
		n, err := s.Put(ctx, "ns/a", dlqtest.Entry(fmt.Sprint("b", i), 10))
		if err != nil {
			t.Fatal(err)
		}
		evicted += n
	}
	if got := len(items(t, s, "ns/a")); got != 5 || evicted != 13 {
		t.Fatalf("%d dead letters held, %d evicted; want 5 held (the bound) and 13 evicted", got, evicted)
	}
}

// TestDLQStorePagesByBytes: the page bound stops a listing of large
// entries before it reads them all, and Next goes on from there.
func TestDLQStorePagesByBytes(t *testing.T) {
	ctx := testCtx(t)
	s := newTestDLQ(dlqTable(t), dlq.DefaultLimits())
	const n = 20 // of 1000 KiB: 20 MB, past dlqPageBytes
	for i := range n {
		if _, err := s.Put(ctx, "ns/a", dlqtest.Entry(fmt.Sprint(i), 1000<<10)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.List(ctx, "ns/a", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) == n || p.Next == 0 || p.Total != n {
		t.Fatalf("a page of %d entries of 1000 KiB, next %d, total %d; want fewer than %d (%d bytes a page) and a next", len(p.Entries), p.Next, p.Total, n, dlqPageBytes)
	}
	seen := len(p.Entries)
	for after := p.Next; after != 0; {
		q, err := s.List(ctx, "ns/a", after, 100)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(q.Entries)
		after = q.Next
	}
	if seen != n {
		t.Fatalf("paged through %d entries; want %d", seen, n)
	}
}

func TestParseDLQKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		id   uint64
		part int
		ok   bool
	}{
		{dlqKey(1), 1, 0, true},
		{dlqPartKey(42, 3), 42, 3, true},
		{"00000000000000000000", 0, 0, false},
		{"1", 0, 0, false},
		{dlqKey(1) + ".0", 0, 0, false},
		{dlqKey(1) + ".01", 0, 0, false},
		{dlqKey(1) + ".", 0, 0, false},
		{"-0000000000000000001", 0, 0, false},
		{"99999999999999999999", 0, 0, false},
	} {
		id, part, err := parseDLQKey(tc.key)
		if (err == nil) != tc.ok || id != tc.id || part != tc.part {
			t.Errorf("parseDLQKey(%q) = %d, %d, %v; want %d, %d, ok %v", tc.key, id, part, err, tc.id, tc.part, tc.ok)
		}
	}
	// The order of keys is the order of ids and parts, and after's lower bound is above
	// its parts and below the next id.
	if !(dlqKey(9) < dlqPartKey(9, 1) && dlqPartKey(9, 1) < dlqKey(9)+"/" && dlqKey(9)+"/" < dlqKey(10)) {
		t.Error("keys out of order")
	}
}

func FuzzParseDLQKey(f *testing.F) {
	f.Add(dlqKey(1))
	f.Add(dlqPartKey(7, 2))
	f.Add("00000000000000000001.x")
	f.Fuzz(func(t *testing.T, s string) {
		id, part, err := parseDLQKey(s)
		if err != nil {
			if !strings.Contains(err.Error(), "not a dead-letter item's key") {
				t.Fatalf("error %v", err)
			}
			return
		}
		again := dlqKey(id)
		if part > 0 {
			again = dlqPartKey(id, part)
		}
		if again != s {
			t.Fatalf("%q parsed as %d, %d, which is %q", s, id, part, again)
		}
	})
}

// BenchmarkDLQStorePut stores dead letters of 1 KiB one at a time into a store at its
// bound of entries, so each store evicts one too.
func BenchmarkDLQStorePut(b *testing.B) {
	ctx := context.Background()
	s := newTestDLQ(dlqTableB(b), dlq.Limits{MaxEntries: 100, MaxBytes: 64 << 20, MaxAge: time.Hour})
	for i := range 100 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDLQStoreList reads a page of 100 dead letters of 1 KiB, of 1,000 held.
func BenchmarkDLQStoreList(b *testing.B) {
	ctx := context.Background()
	s := newTestDLQ(dlqTableB(b), dlq.DefaultLimits())
	for i := range 1000 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if p, err := s.List(ctx, "ns/t", 0, 100); err != nil || len(p.Entries) != 100 || p.Total != 1000 {
			b.Fatalf("listed %d of %d (%v)", len(p.Entries), p.Total, err)
		}
	}
}

// TestDLQStoreReplicasEvictOnce: two replicas storing into one trigger at once, past
// its bound: every dead letter is either held or counted evicted by exactly one of
// them, the trigger holds no more than the bound, and the counters match the items.
func TestDLQStoreReplicasEvictOnce(t *testing.T) {
	ctx := testCtx(t)
	lt := dlqTable(t)
	lim := dlq.Limits{MaxEntries: 10, MaxBytes: 1 << 20, MaxAge: time.Hour}
	a := newTestDLQ(lt, lim)
	b := newDLQStore(lt, a.stream, lim, a.log)
	const each = 30
	evicted := make(chan int, 2)
	errs := make(chan error, 2)
	for _, s := range []*dlqStore{a, b} {
		go func() {
			n := 0
			for i := range each {
				k, err := s.Put(ctx, "ns/a", dlqtest.Entry(fmt.Sprint(i), 10))
				if err != nil {
					errs <- err
					return
				}
				n += k
			}
			evicted <- n
		}()
	}
	total := 0
	for range 2 {
		select {
		case n := <-evicted:
			total += n
		case err := <-errs:
			t.Fatal(err)
		}
	}
	m, err := a.meta(ctx, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	_, p := listIDs(t, b, "ns/a")
	t.Logf("held %d, evicted %d", len(p.Entries), total)
	if held := len(p.Entries); held > lim.MaxEntries || held+total != 2*each || m.n != int64(held) {
		t.Fatalf("held %d, evicted %d, counted %d; want at most %d held, held+evicted = %d, the count = held", held, total, m.n, lim.MaxEntries, 2*each)
	}
}
