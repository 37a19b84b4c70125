package sluicetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// Answer is what sending one event got.
type Answer struct {
	Status     int    // the HTTP status; 0 when no answer came
	RetryAfter bool   // the answer carried a Retry-After header
	Text       string // for a refusal: the status and the start of the body; for no answer: the error
}

// Load configures a load driver: the end-to-end, cluster and fault tests' one way of
// sending events at a steady rate. Event n = 0, 1, 2, … falls due at start + due(n) of
// Pacer's schedule (loadtest/pacer, as for `sluice load`); a pool of Workers takes up the
// events in turn, waits until each is due and calls Send. An event taken up more than
// MaxLate after it fell due, because every worker was busy, is skipped: not sent, counted
// in Skipped. Per event the run records whether it was accepted (202) and when, and the
// other answers by status.
type Load struct {
	Pacer   pacer.Pacer           // the schedule; pacer.Constant{Rate: r} runs until Stop
	Workers int                   // events in flight at most; default 64
	MaxLate time.Duration         // default 1s: one second of backlog, then events are skipped
	Send    func(n uint64) Answer // sends event n; Poster.Send posts a CloudEvent
}

// Acceptance is an event that got a 202, and when.
type Acceptance struct {
	N  uint64
	At time.Time
}

// LoadRun is a running Load. Its methods are safe for concurrent use while it runs.
type LoadRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	next   atomic.Uint64

	mu         sync.Mutex
	sent       int
	skipped    int
	codes      map[int]int
	noRetry    int
	last       string
	acceptedAt []int64 // by event number: Unix ns of its 202; 0 when not accepted
	accepted   int
}

// Start starts the load; it runs until Pacer's schedule ends, ctx is cancelled or Stop.
func (o Load) Start(ctx context.Context) *LoadRun {
	if o.Workers <= 0 {
		o.Workers = 64
	}
	if o.MaxLate <= 0 {
		o.MaxLate = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &LoadRun{cancel: cancel, done: make(chan struct{}), codes: map[int]int{}}
	start := time.Now()
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			for {
				n := l.next.Add(1) - 1
				due, ok := pacer.Due(o.Pacer, n)
				if !ok {
					return
				}
				if d := time.Until(start.Add(due)); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-ctx.Done():
						return
					}
				} else if ctx.Err() != nil {
					return
				} else if -d > o.MaxLate {
					l.mu.Lock()
					l.skipped++
					l.mu.Unlock()
					continue
				}
				l.record(n, o.Send(n))
			}
		})
	}
	go func() {
		wg.Wait()
		cancel()
		close(l.done)
	}()
	return l
}

// record notes the answer to event n.
func (l *LoadRun) record(n uint64, a Answer) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.codes[a.Status]++
	if a.Status == http.StatusAccepted {
		for uint64(len(l.acceptedAt)) <= n {
			l.acceptedAt = append(l.acceptedAt, 0)
		}
		l.acceptedAt[n] = now
		l.accepted++
		return
	}
	l.last = a.Text
	switch a.Status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInsufficientStorage:
		if !a.RetryAfter {
			l.noRetry++
		}
	}
}

// Stop ends the load and waits for the events in flight to be answered.
func (l *LoadRun) Stop() {
	l.cancel()
	<-l.done
}

// Wait waits until the schedule has ended and every event sent was answered.
func (l *LoadRun) Wait() { <-l.done }

// Issued is the number of events taken up so far: every event n below it was sent,
// skipped or (once stopped) dropped; none above it was sent.
func (l *LoadRun) Issued() uint64 { return l.next.Load() }

// Sent is the number of events sent (answered or not).
func (l *LoadRun) Sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// Skipped is the number of events not sent because they fell due more than MaxLate
// before a worker was free.
func (l *LoadRun) Skipped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipped
}

// Count is the number of answers with any of the statuses (0: no answer).
func (l *LoadRun) Count(statuses ...int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range statuses {
		n += l.codes[s]
	}
	return n
}

// Codes returns the number of answers by status (0: no answer).
func (l *LoadRun) Codes() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int, len(l.codes))
	for c, n := range l.codes {
		out[c] = n
	}
	return out
}

// Accepted is the number of events that got a 202.
func (l *LoadRun) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

// IsAccepted tells whether event n got a 202.
func (l *LoadRun) IsAccepted(n uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return n < uint64(len(l.acceptedAt)) && l.acceptedAt[n] != 0
}

// Acceptances returns the events that got a 202 before t (every one for the zero time),
// by event number.
func (l *LoadRun) Acceptances(before time.Time) []Acceptance {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Acceptance, 0, l.accepted)
	for n, at := range l.acceptedAt {
		if at != 0 && (before.IsZero() || at < before.UnixNano()) {
			out = append(out, Acceptance{N: uint64(n), At: time.Unix(0, at)})
		}
	}
	return out
}

// AcceptedBefore returns the numbers of the events that got a 202 before t (every one
// for the zero time), in order.
func (l *LoadRun) AcceptedBefore(t time.Time) []uint64 {
	acc := l.Acceptances(t)
	out := make([]uint64, len(acc))
	for i, a := range acc {
		out[i] = a.N
	}
	return out
}

// FirstAcceptedAfter is how long after t the first 202 at or after t came; -1s when
// none did.
func (l *LoadRun) FirstAcceptedAfter(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := int64(-1)
	for _, at := range l.acceptedAt {
		if at != 0 && at >= t.UnixNano() && (first < 0 || at < first) {
			first = at
		}
	}
	if first < 0 {
		return -time.Second
	}
	return time.Unix(0, first).Sub(t)
}

// Refusals formats the answers other than 202 by status, in order: "0×3 503×12".
func (l *LoadRun) Refusals() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var codes []int
	for c := range l.codes {
		if c != http.StatusAccepted {
			codes = append(codes, c)
		}
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", c, l.codes[c])
	}
	return strings.Join(parts, " ")
}

// NoRetryAfter is the number of 429, 503 and 507 answers without Retry-After.
func (l *LoadRun) NoRetryAfter() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noRetry
}

// LastRefusal is the Text of the last answer other than 202 ("" if none).
func (l *LoadRun) LastRefusal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// refusalText bounds how much of a refusal's body an Answer keeps.
const refusalText = 512

// Poster posts events as binary-mode CloudEvents: ce-id ID(n), ce-type Type, ce-source
// Source, Content-Type ContentType (default application/octet-stream), body Data.
type Poster struct {
	Client      *http.Client // default http.DefaultClient
	URL         string
	ID          func(n uint64) string // default: n in decimal
	Type        string
	Source      string
	ContentType string
	Data        []byte
}

// NewClient returns an HTTP client keeping up to conns idle connections to a host (Go's
// default keeps 2, so a load of more would dial for almost every event) and giving up
// on a request after timeout.
func NewClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: timeout}
}

// Send posts event n and returns its answer. It reads the answer's body to its end (so
// the connection is reused) and keeps its first 512 bytes in the Text of a refusal.
func (p Poster) Send(n uint64) Answer {
	id := strconv.FormatUint(n, 10)
	if p.ID != nil {
		id = p.ID(n)
	}
	req, err := http.NewRequest(http.MethodPost, p.URL, bytes.NewReader(p.Data))
	if err != nil {
		return Answer{Text: err.Error()}
	}
	ct := p.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	req.Header.Set("ce-specversion", "1.0")
	req.Header.Set("ce-id", id)
	req.Header.Set("ce-source", p.Source)
	req.Header.Set("ce-type", p.Type)
	req.Header.Set("Content-Type", ct)
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return Answer{Text: err.Error()}
	}
	defer resp.Body.Close()
	a := Answer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After") != ""}
	if resp.StatusCode != http.StatusAccepted {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, refusalText))
		a.Text = strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, body))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return a
}
