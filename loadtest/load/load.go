// Package load is the open-model load generator behind `sluice load` and `sluice bench`.
//
// Requests are scheduled by a pacer.Pacer at intended times start + due(n); latency is
// measured from the intended time, not from when a worker got round to sending, so a
// target that stalls shows up as latency rather than as a quietly lower rate (no
// coordinated omission). A fixed pool of workers, each owning one keep-alive
// connection, takes hit numbers from an atomic counter, sleeps until the hit is due
// and sends it. When every worker is busy the next hit is sent late; the lag is
// measured and the result says whether the generator kept the intended rate.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Options configure a run. Target, Pacer and Template are required.
type Options struct {
	Target   string
	Pacer    pacer.Pacer // the whole schedule, warm-up included
	Template *cevent.Template

	// WarmupHits are the first hits of the schedule: sent, marked with the warm-up
	// extension, and left out of the results. Warmup is their duration.
	WarmupHits uint64
	Warmup     time.Duration

	Connections int           // workers = keep-alive connections = max in flight (default 256)
	Timeout     time.Duration // per request (default 30s)
	Insecure    bool          // skip TLS verification for https targets
	StdClient   bool          // use net/http even for http:// targets
	Header      [][2]string   // extra headers, name and value, sent with every request

	// TrackAccepted keeps a bitset of the events acknowledged with 2xx (Result.Accepted),
	// which bench compares with what its receiver got.
	TrackAccepted bool

	// ShareIndex and ShareOf split the schedule between ShareOf generators (agents of a
	// distributed run): this one sends only hits n with n mod ShareOf = ShareIndex, so
	// every generator keeps the schedule's timing and the sequence numbers of the run
	// stay unique across them. ShareOf 0 or 1 sends every hit.
	ShareIndex, ShareOf int

	// StartAt, if set, is the run's time origin: connections are opened first, then the
	// run waits for it (agents of a distributed run start together). Reached less than
	// MaxLateStart late, it stays the origin and the hits already due go out late (and
	// show as dispatch lag); later than that, the run starts from now.
	StartAt time.Time

	// OnStart, if set, is called with the run's time origin (hit n is due at
	// start + due(n)) just before the first hit, after connections are opened.
	OnStart func(start time.Time)

	// Progress, if set, receives a one-line status each second.
	Progress io.Writer
}

// Lag thresholds for the verdict on the generator itself.
const (
	// LateAfter is how far behind its intended time a request must be dispatched to
	// count as late.
	LateAfter = 10 * time.Millisecond
	// KeptRate is the fraction of the intended rate the generator must achieve.
	KeptRate = 0.95
	// MaxBusy is the largest share of requests that may find every worker busy when
	// they fall due (taken up more than LateAfter late) before the generator counts as
	// saturated.
	MaxBusy = 0.01
	// MaxLateStart is how late after Options.StartAt a run may begin and keep it as
	// its time origin.
	MaxLateStart = time.Second
)

// Run executes the schedule against the target and returns the results. It stops
// early, with the results so far, when ctx is cancelled.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Pacer == nil || o.Template == nil {
		return nil, errors.New("load: pacer and template are required")
	}
	u, err := url.Parse(o.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("load: target %q must be an http:// or https:// URL", o.Target)
	}
	if o.Connections <= 0 {
		o.Connections = 256
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ShareOf <= 1 {
		o.ShareIndex, o.ShareOf = 0, 1
	}
	if o.ShareIndex < 0 || o.ShareIndex >= o.ShareOf {
		return nil, fmt.Errorf("load: share index %d outside 0…%d", o.ShareIndex, o.ShareOf-1)
	}
	steps, stepEnd := scheduleSteps(o)
	rec := newRecorder(stepEnd, o.Template.EventsPerRequest(), o.TrackAccepted)

	var (
		next     atomic.Uint64 // next hit number
		inFlight atomic.Int64
		sentSec  atomic.Uint64 // dispatched in the current second
		busy     atomic.Uint64 // hits taken up more than LateAfter after they were due
		wg       sync.WaitGroup
		senders  = make([]sender, o.Connections)
	)
	var std = newStdClientIf(u, o)
	for i := range senders {
		senders[i] = newSender(u, o.Template, o.Timeout, std, o.Header)
	}
	prewarm(ctx, senders)
	if d := time.Until(o.StartAt); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	start := time.Now()
	if !o.StartAt.IsZero() && start.Sub(o.StartAt) < MaxLateStart {
		start = o.StartAt
	}
	if o.OnStart != nil {
		o.OnStart(start)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // on cancellation, unblock requests in flight
		<-runCtx.Done()
		for _, s := range senders {
			s.abort()
		}
	}()
	epr := uint64(o.Template.EventsPerRequest())
	for _, s := range senders {
		wg.Add(1)
		go func(s sender) {
			defer wg.Done()
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			var x result
			for {
				n := (next.Add(1)-1)*uint64(o.ShareOf) + uint64(o.ShareIndex)
				due, ok := pacer.Due(o.Pacer, n)
				if !ok {
					return
				}
				intended := start.Add(due)
				if d := time.Until(intended); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-runCtx.Done():
						return
					}
				} else {
					if runCtx.Err() != nil {
						return
					}
					if -d > LateAfter && n >= o.WarmupHits {
						busy.Add(1) // no worker was free when the hit fell due
					}
				}
				x = result{seq: n * epr, due: due, intended: intended, warmup: n < o.WarmupHits}
				x.sent = time.Now()
				sentSec.Add(1)
				inFlight.Add(1)
				x.status, x.bytesIn, x.bytesOut, x.err = s.send(outgoing{seq: x.seq, sent: intended.UnixNano(), warmup: x.warmup})
				x.done = time.Now()
				inFlight.Add(-1)
				if errors.Is(x.err, errAborted) || (x.err != nil && runCtx.Err() != nil) {
					return // cancelled: not a result of the target
				}
				rec.record(&x)
			}
		}(s)
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var seconds []stats.LoadSecond
	tick := func(t int, last bool) {
		d, okN, failed, sum := rec.takeSecond()
		sent := sentSec.Swap(0)
		if last && d == 0 && sent == 0 {
			return // nothing happened in the trailing partial second
		}
		sec := stats.LoadSecond{
			T:        t,
			Warmup:   time.Duration(t)*time.Second < o.Warmup,
			Intended: o.hitsBefore(time.Duration(t+1)*time.Second) - o.hitsBefore(time.Duration(t)*time.Second),
			Sent:     sent,
			Done:     d, OK: okN, Failed: failed,
			P50: ms(sum.P50), P90: ms(sum.P90), P99: ms(sum.P99), P999: ms(sum.P999), Max: ms(sum.Max),
			InFlight: inFlight.Load(),
		}
		seconds = append(seconds, sec)
		if o.Progress != nil {
			printProgress(o.Progress, sec)
		}
	}
	t := 0
	for stop := false; !stop; {
		wait := time.Until(start.Add(time.Duration(t+1) * time.Second))
		select {
		case <-done:
			stop = true
			if time.Since(start) > time.Duration(t)*time.Second+50*time.Millisecond {
				tick(t, true) // the partial last second
			}
		case <-time.After(wait):
			tick(t, false)
			t++
		}
	}
	return buildResult(o, u, start, rec, steps, seconds, busy.Load(), ctx.Err() != nil), nil
}

// hitsBefore counts this generator's share of the hits due before d.
func (o *Options) hitsBefore(d time.Duration) uint64 {
	return shareOf(pacer.HitsBefore(o.Pacer, d), o.ShareIndex, o.ShareOf)
}

// shareOf counts the hit numbers n < hits with n mod of = index.
func shareOf(hits uint64, index, of int) uint64 {
	if of <= 1 {
		return hits
	}
	if hits <= uint64(index) {
		return 0
	}
	return (hits-uint64(index)-1)/uint64(of) + 1
}

// newStdClientIf returns a net/http client for https targets (or when asked), nil when
// the raw sender will do.
func newStdClientIf(u *url.URL, o Options) *http.Client {
	if u.Scheme == "https" || o.StdClient {
		return newStdClient(o.Connections, o.Timeout, o.Insecure)
	}
	return nil
}

// prewarm opens the keep-alive connections before the clock starts, so the first
// second does not measure a storm of dials. Failures are ignored: the request that
// needs the connection will dial again and report the error.
func prewarm(ctx context.Context, senders []sender) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, s := range senders {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); s.warm(); <-sem }()
	}
	wg.Wait()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printProgress(w io.Writer, s stats.LoadSecond) {
	okPct := 100.0
	if s.Done > 0 {
		okPct = 100 * float64(s.OK) / float64(s.Done)
	}
	phase := ""
	if s.Warmup {
		phase = " (warm-up)"
	}
	fmt.Fprintf(w, "[%4ds] rate %6d intended %6d achieved /s  done %6d  ok %6.2f%%  p99 %8.2fms  in-flight %d%s\n",
		s.T+1, s.Intended, s.Sent, s.Done, okPct, s.P99, s.InFlight, phase)
}

// scheduleSteps returns the measured steps (warm-up removed) and the offsets at which
// each ends, in run time (warm-up included), for the per-step table.
func scheduleSteps(o Options) ([]pacer.Step, []time.Duration) {
	p := o.Pacer
	if w, ok := p.(pacer.Warmup); ok {
		p = w.Next
	}
	st, ok := p.(pacer.Stepper)
	if !ok {
		return nil, nil
	}
	steps := st.Steps()
	ends := make([]time.Duration, len(steps))
	at := o.Warmup
	for i, s := range steps {
		at += s.Duration
		ends[i] = at
	}
	return steps, ends
}
