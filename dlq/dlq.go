// Package dlq is the dead-letter store: where a trigger's events go when their delivery
// failed for good and neither the trigger nor its broker names a deadLetterSink. They
// are kept, bounded per trigger, for an operator to list, redrive or purge
// (docs/dead-letters.md).
//
// A Store keeps one list of entries per trigger, oldest first. The memory store here
// lives as long as the process; a durable channel provides its own (channel.DLQStorer),
// shared by every replica of the broker. Index is those lists, bounded by Limits, as the
// memory store and the stores that read their entries from a log keep them.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// Defaults of Limits (the flags --dlq-max-entries, --dlq-max-bytes, --dlq-max-age).
const (
	DefaultMaxEntries = 10_000
	DefaultMaxBytes   = 64 << 20
	DefaultMaxAge     = 7 * 24 * time.Hour
)

// MaxPage bounds the entries one List returns.
const MaxPage = 1000

// MaxReason bounds Entry.Reason, in bytes.
const MaxReason = 1024

// ErrNotFound is returned for an entry the store does not hold (any more).
var ErrNotFound = errors.New("no such dead letter")

// Limits bound what a Store keeps of each trigger. When a new entry would exceed
// MaxEntries or MaxBytes, the oldest entries of that trigger are evicted first; entries
// older than MaxAge are evicted too. Evictions are counted (Put's answer).
type Limits struct {
	MaxEntries int           // entries per trigger; at least 1
	MaxBytes   int64         // bytes per trigger (Entry.Size); at least 1
	MaxAge     time.Duration // age of an entry; at least 1s
}

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits {
	return Limits{MaxEntries: DefaultMaxEntries, MaxBytes: DefaultMaxBytes, MaxAge: DefaultMaxAge}
}

// Validate returns an error naming the flag of a limit that is out of range.
func (l Limits) Validate() error {
	switch {
	case l.MaxEntries < 1:
		return fmt.Errorf("--dlq-max-entries %d: want at least 1", l.MaxEntries)
	case l.MaxBytes < 1:
		return fmt.Errorf("--dlq-max-bytes %d: want at least 1", l.MaxBytes)
	case l.MaxAge < time.Second:
		return fmt.Errorf("--dlq-max-age %s: want at least 1s", l.MaxAge)
	}
	return nil
}

// Entry is one dead-lettered event and why it failed.
type Entry struct {
	// ID names the entry within its trigger's list; IDs grow with time.
	ID uint64 `json:"id"`
	// Time is when the event was stored.
	Time time.Time `json:"time"`
	// Attempts is how many delivery attempts were made before it was given up.
	Attempts int `json:"attempts"`
	// Code is the HTTP status of the last response (knativeerrorcode): 500 for a network
	// error or a timeout.
	Code int `json:"code"`
	// Dest is where the last attempt went (knativeerrordest), without credentials.
	Dest string `json:"dest"`
	// Reason is the start of the last response's body or of the error (at most MaxReason
	// bytes).
	Reason string `json:"reason"`
	// Event is the event as it was received, without the error extensions.
	Event *event.Event `json:"-"`
}

// Size is what e counts against Limits.MaxBytes.
func (e *Entry) Size() int64 {
	return int64(e.Event.Size() + len(e.Dest) + len(e.Reason) + 64)
}

// Page is one answer of List: entries of one trigger, oldest first.
type Page struct {
	Entries []Entry
	// Total and Bytes are what the trigger's list holds now.
	Total int
	Bytes int64
	// Next is the after of the following page; 0 when this page is the last.
	Next uint64
	// Last is the highest ID the trigger's list holds; 0 when it is empty.
	Last uint64
}

// Store keeps dead letters per trigger ("namespace/name"). Implementations are safe for
// concurrent use.
type Store interface {
	// Put stores e (its ID and Time are set by the store) for trigger and returns how many
	// older entries of trigger it evicted to stay within the limits.
	Put(ctx context.Context, trigger string, e Entry) (evicted int, err error)
	// List returns up to limit (at most MaxPage) entries of trigger whose ID is above
	// after, oldest first.
	List(ctx context.Context, trigger string, after uint64, limit int) (Page, error)
	// Delete removes the entry id of trigger; ErrNotFound if it is not there.
	Delete(ctx context.Context, trigger string, id uint64) error
	// Purge removes every entry of trigger and returns how many there were.
	Purge(ctx context.Context, trigger string) (int, error)
	// Durable reports whether the entries outlive the process.
	Durable() bool
}

// Holder is implemented by a Store that tells whether it holds an entry more cheaply than
// List does: a redrive asks before each attempt. Its answer may miss what other replicas
// did in the last moments (a dead letter purged there may be redriven once more).
type Holder interface {
	// Holds reports whether trigger's entry id is stored.
	Holds(ctx context.Context, trigger string, id uint64) (bool, error)
}

// Holds reports whether s holds trigger's entry id: through Holder when s is one, else
// with a List of one entry.
func Holds(ctx context.Context, s Store, trigger string, id uint64) (bool, error) {
	if h, ok := s.(Holder); ok {
		return h.Holds(ctx, trigger, id)
	}
	p, err := s.List(ctx, trigger, id-1, 1)
	if err != nil {
		return false, err
	}
	return len(p.Entries) > 0 && p.Entries[0].ID == id, nil
}

// ClampPage returns limit bounded to 1..MaxPage; 0 or less means 100.
func ClampPage(limit int) int {
	switch {
	case limit <= 0:
		return 100
	case limit > MaxPage:
		return MaxPage
	}
	return limit
}

// TrimReason bounds a reason to MaxReason bytes of valid UTF-8.
func TrimReason(s string) string {
	if len(s) > MaxReason {
		s = s[:MaxReason]
	}
	return strings.ToValidUTF8(s, "")
}
