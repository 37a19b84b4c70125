package dlq_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

func TestIndex(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e1 := dlqtest.Entry("1", 100)
	size := e1.Size() // of every entry below but the big one
	// add appends entry id (its event ID too) at time at to trigger, tagged
	// "trigger/id", and answers the tags it evicted.
	add := func(trigger string, id uint64, at time.Time) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			e := dlqtest.Entry(fmt.Sprint(id), 100)
			e.ID, e.Time = id, at
			return tags(x.Add(trigger, e, fmt.Sprintf("%s/%d", trigger, id)))
		}
	}
	addBig := func(trigger string, id uint64) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			e := dlqtest.Entry(fmt.Sprint(id), 1000)
			e.ID, e.Time = id, t0
			return tags(x.Add(trigger, e, fmt.Sprintf("%s/%d", trigger, id)))
		}
	}
	// page answers "ids total bytes next last" of a page of trigger.
	page := func(trigger string, after uint64, limit int) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			p := x.Page(trigger, after, limit)
			var ids []string
			for _, e := range p.Entries {
				ids = append(ids, fmt.Sprint(e.ID))
			}
			return fmt.Sprintf("[%s] total %d bytes %d next %d last %d", strings.Join(ids, ","), p.Total, p.Bytes, p.Next, p.Last)
		}
	}
	expire := func(trigger string, now time.Time) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string { return tags(x.Expire(trigger, now)) }
	}
	taken := func(trigger string) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string { return fmt.Sprint(x.TakeExpired(trigger)) }
	}
	del := func(trigger string, id uint64) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			it, ok := x.Delete(trigger, id)
			return fmt.Sprint(it.Tag, " ", ok)
		}
	}
	get := func(trigger string, id uint64) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			it, ok := x.Get(trigger, id)
			return fmt.Sprint(it.Tag, " ", ok)
		}
	}
	purge := func(trigger string) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string { return fmt.Sprint(x.Purge(trigger)) }
	}
	items := func(trigger string) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string { return tags(x.Items(trigger)) }
	}
	evictWhileOver := func(trigger string, maxLen int) func(*dlq.Index[string]) string {
		return func(x *dlq.Index[string]) string {
			return fmt.Sprint(x.EvictOldestWhile(trigger, func(dlq.Item[string]) bool { return x.Len() > maxLen }))
		}
	}
	size3 := fmt.Sprint(3 * size)
	lim := dlq.Limits{MaxEntries: 3, MaxBytes: 1 << 20, MaxAge: time.Hour}
	type step struct {
		do   func(*dlq.Index[string]) string
		want string
	}
	for _, tc := range []struct {
		name  string
		lim   dlq.Limits
		steps []step
	}{
		{"count", lim, []step{
			{add("a", 1, t0), ""}, {add("a", 2, t0), ""}, {add("a", 3, t0), ""},
			{add("b", 4, t0), ""},
			{add("a", 5, t0), "a/1"},
			{add("a", 6, t0), "a/2"},
			{page("a", 0, 10), "[3,5,6] total 3 bytes " + size3 + " next 0 last 6"},
			{page("b", 0, 10), fmt.Sprintf("[4] total 1 bytes %d next 0 last 4", size)},
		}},
		{"bytes", dlq.Limits{MaxEntries: 10, MaxBytes: 2*size + 1, MaxAge: time.Hour}, []step{
			{add("a", 1, t0), ""}, {add("a", 2, t0), ""},
			{add("a", 3, t0), "a/1"},
			{add("b", 4, t0), ""},
			{page("a", 0, 10), fmt.Sprintf("[2,3] total 2 bytes %d next 0 last 3", 2*size)},
		}},
		{"larger than the bytes bound: not kept", dlq.Limits{MaxEntries: 10, MaxBytes: 2 * size, MaxAge: time.Hour}, []step{
			{add("a", 1, t0), ""},
			{addBig("a", 2), "a/2"},
			{addBig("b", 3), "b/3"},
			{page("a", 0, 10), fmt.Sprintf("[1] total 1 bytes %d next 0 last 1", size)},
			{page("b", 0, 10), "[] total 0 bytes 0 next 0 last 0"},
		}},
		{"age, against the added entry's time", lim, []step{
			{add("a", 1, t0), ""},
			{add("a", 2, t0.Add(30*time.Minute)), ""},
			{add("b", 3, t0), ""},
			{add("a", 4, t0.Add(61*time.Minute)), "a/1"},
			{add("a", 5, t0.Add(2*time.Hour)), "a/2"},
			{page("a", 0, 10), fmt.Sprintf("[4,5] total 2 bytes %d next 0 last 5", 2*size)},
			{page("b", 0, 10), fmt.Sprintf("[3] total 1 bytes %d next 0 last 3", size)},
			{taken("a"), "0"},
		}},
		{"expire counts for TakeExpired", lim, []step{
			{add("a", 1, t0), ""},
			{add("a", 2, t0.Add(30*time.Minute)), ""},
			{expire("a", t0.Add(time.Hour)), ""}, // exactly MaxAge old: kept
			{expire("a", t0.Add(75*time.Minute)), "a/1"},
			{expire("b", t0.Add(75*time.Minute)), ""},
			{page("a", 0, 10), fmt.Sprintf("[2] total 1 bytes %d next 0 last 2", size)},
			{expire("a", t0.Add(3*time.Hour)), "a/2"},
			{page("a", 0, 10), "[] total 0 bytes 0 next 0 last 0"},
			{taken("a"), "2"},
			{taken("a"), "0"},
		}},
		{"delete", lim, []step{
			{add("a", 1, t0), ""}, {add("a", 2, t0), ""}, {add("a", 3, t0), ""},
			{get("a", 2), "a/2 true"},
			{del("a", 2), "a/2 true"},
			{del("a", 2), " false"},
			{get("a", 2), " false"},
			{del("b", 1), " false"},
			{del("a", 7), " false"},
			{page("a", 0, 10), fmt.Sprintf("[1,3] total 2 bytes %d next 0 last 3", 2*size)},
			{del("a", 3), "a/3 true"}, // the last one
			{del("a", 1), "a/1 true"}, // the first one
			{page("a", 0, 10), "[] total 0 bytes 0 next 0 last 0"},
		}},
		{"purge", lim, []step{
			{add("a", 1, t0), ""}, {add("a", 2, t0.Add(2*time.Hour)), "a/1"}, {add("a", 3, t0.Add(2*time.Hour)), ""},
			{add("b", 4, t0), ""},
			{expire("a", t0.Add(4*time.Hour)), "a/2,a/3"},
			{add("a", 5, t0.Add(4*time.Hour)), ""},
			{items("a"), "a/5"},
			{purge("a"), "1"},
			{purge("a"), "0"},
			{purge("c"), "0"},
			{items("a"), ""},
			{taken("a"), "2"}, // a purge keeps the count of expired entries
			{page("b", 0, 10), fmt.Sprintf("[4] total 1 bytes %d next 0 last 4", size)},
		}},
		{"pages", dlq.Limits{MaxEntries: 10, MaxBytes: 1 << 20, MaxAge: time.Hour}, []step{
			{add("a", 1, t0), ""}, {add("a", 2, t0), ""}, {add("a", 4, t0), ""}, {add("a", 5, t0), ""}, {add("a", 9, t0), ""},
			{page("a", 0, 2), "[1,2] total 5 bytes " + fmt.Sprint(5*size) + " next 2 last 9"},
			{page("a", 2, 2), "[4,5] total 5 bytes " + fmt.Sprint(5*size) + " next 5 last 9"},
			{page("a", 5, 2), "[9] total 5 bytes " + fmt.Sprint(5*size) + " next 0 last 9"},
			{page("a", 3, 1), "[4] total 5 bytes " + fmt.Sprint(5*size) + " next 4 last 9"}, // after an ID not held
			{page("a", 9, 2), "[] total 5 bytes " + fmt.Sprint(5*size) + " next 0 last 9"},
			{page("a", 0, 0), "[1,2,4,5,9] total 5 bytes " + fmt.Sprint(5*size) + " next 0 last 9"}, // 0: the default page
			{page("nobody", 0, 2), "[] total 0 bytes 0 next 0 last 0"},
		}},
		{"oldest of all triggers first", lim, []step{
			{add("a", 1, t0), ""}, {add("b", 2, t0), ""}, {add("a", 3, t0), ""}, {add("c", 4, t0), ""},
			{evictWhileOver("a", 4), "0"},
			{evictWhileOver("a", 1), "2"}, // a/1, b/2, a/3: two of them a's
			{items("a"), ""}, {items("b"), ""}, {items("c"), "c/4"},
			{taken("a"), "0"}, {taken("b"), "1"}, {taken("c"), "0"},
			{evictWhileOver("a", 0), "0"},
			{taken("c"), "1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := dlq.NewIndex[string](tc.lim)
			for i, s := range tc.steps {
				if got := s.do(x); got != s.want {
					t.Fatalf("step %d: %q; want %q", i, got, s.want)
				}
				// Len and Bytes are the sums of the lists.
				n, b := 0, int64(0)
				for _, tr := range []string{"a", "b", "c"} {
					for _, it := range x.Items(tr) {
						n++
						b += it.Entry.Size()
					}
				}
				if x.Len() != n || x.Bytes() != b {
					t.Fatalf("step %d: Len %d, Bytes %d; the lists hold %d entries, %d bytes", i, x.Len(), x.Bytes(), n, b)
				}
			}
			x.Reset()
			if x.Len() != 0 || x.Bytes() != 0 || x.TakeExpired("a") != 0 || x.Page("a", 0, 10).Total != 0 {
				t.Fatalf("after Reset: Len %d, Bytes %d", x.Len(), x.Bytes())
			}
		})
	}
}

// tags joins the tags of items with commas.
func tags(items []dlq.Item[string]) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.Tag
	}
	return strings.Join(s, ",")
}
