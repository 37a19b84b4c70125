// Package bench runs a load and a receiver together, through a target (a broker whose
// trigger points at the receiver, or the receiver itself for a direct baseline), waits
// for deliveries to settle, and joins what was sent with what arrived: publish and
// end-to-end latency, send and delivery throughput, failures, and lost events —
// acknowledged with 2xx by the target but never delivered. FindMax repeats such runs at
// rates it chooses (ramp, then bisect) to find the highest that holds a set of objectives.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Options configure a bench run.
type Options struct {
	Load         load.Options    // Target is ignored when Direct
	Receive      receive.Options // the in-process receiver's behaviour
	ReceiverAddr string          // listen address, default 127.0.0.1:9000
	Direct       bool            // send to the receiver itself
	// Settle bounds the wait, after the last request, for accepted events to arrive.
	Settle   time.Duration
	Progress io.Writer // per-second progress lines (nil = none)
	// Backlog > 0 makes the receiver refuse (503) every delivery while the load runs,
	// then accept: the load's schedule should send about Backlog events. The result's
	// Backlog says how fast the target drained them.
	Backlog uint64
	// Faults are shell commands run at times in the run (at most MaxFaults).
	Faults []Fault
}

// Result joins the load's and the receiver's results. Second t of every series is the
// same wall-clock second: both count from the load's start.
type Result struct {
	Load      *load.Result    `json:"load"`
	Receive   *receive.Report `json:"receive"`
	Accepted  uint64          `json:"accepted"`  // events acknowledged 2xx (warm-up included)
	Delivered uint64          `json:"delivered"` // of those, received
	Lost      uint64          `json:"lost"`      // accepted, never received
	LostPct   float64         `json:"lost_pct"`  // Lost / Accepted × 100
	// LostBySecond counts lost events by the second they were due to be sent.
	LostBySecond []uint64      `json:"lost_by_second"`
	SettleTime   time.Duration `json:"settle_ns"` // time from the end of the load until all arrived (or Settle)
	Settled      bool          `json:"settled"`   // every accepted event arrived
	// FindMax is the search of a --find-max run, whose result this is of its highest
	// passing step (or its last step, if none passed); nil otherwise.
	FindMax *MaxSearch `json:"find_max,omitempty"`
	// Backlog is the drain of a --backlog run; nil otherwise.
	Backlog *Backlog `json:"backlog,omitempty"`
	// Faults are the --fault commands, what they did and what they cost.
	Faults []FaultRecord `json:"faults,omitempty"`
}

// Run executes a bench run.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.ReceiverAddr == "" {
		o.ReceiverAddr = "127.0.0.1:9000"
	}
	if o.Settle <= 0 {
		o.Settle = 10 * time.Second
	}
	if len(o.Faults) > MaxFaults {
		return nil, fmt.Errorf("bench: %d faults, at most %d", len(o.Faults), MaxFaults)
	}
	ln, err := receive.Listen(o.ReceiverAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w: bench runs its own receiver at --receiver-addr %s; stop the receiver already there (such as a 'sluice receive'), or give bench another --receiver-addr that the broker's trigger delivers to", err, o.ReceiverAddr)
	}
	if err != nil {
		return nil, err
	}
	rcv := receive.New(o.Receive)
	srv, err := receive.NewServer(ln, rcv)
	if err != nil {
		return nil, err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if o.Direct {
		o.Load.Target = "http://" + dialable(ln.Addr()) + "/"
	}
	if o.Load.Target == "" {
		return nil, errors.New("bench: --target is required unless --direct")
	}
	seriesCtx, stopSeries := context.WithCancel(context.Background())
	seriesDone := make(chan struct{})
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	faultsDone := make(chan []FaultRecord, 1)
	var start time.Time
	o.Load.TrackAccepted = true
	o.Load.Progress = o.Progress
	o.Load.OnStart = func(s time.Time) {
		start = s
		go func() { rcv.Series(seriesCtx, s); close(seriesDone) }()
		go func() { faultsDone <- runFaults(faultCtx, s, o.Faults) }()
	}
	rcv.SetRefusing(o.Backlog > 0)
	lr, err := load.Run(ctx, o.Load)
	if err != nil {
		stopSeries()
		return nil, fmt.Errorf("bench: %w", err)
	}
	res := &Result{Load: lr, Accepted: lr.Accepted.Len()}
	endLoad := time.Now()
	var delivered0 uint64
	if o.Backlog > 0 {
		res.Backlog = &Backlog{Requested: o.Backlog, Events: res.Accepted, OpenedAt: endLoad.Sub(start)}
		rcv.SetRefusing(false)
		delivered0 = rcv.Count()
	}
	// Settle: wait until the receiver has every accepted event and every fault has
	// finished, or the timeout.
	run := o.Load.Template.Run
	deadline := endLoad.Add(o.Settle)
	var faults []FaultRecord
	faultsIn := faultsDone
	if start.IsZero() { // the load stopped before its start: no fault was scheduled
		faultsIn = nil
	}
	for {
		select {
		case faults = <-faultsIn:
			faultsIn = nil
		default:
		}
		seen := rcv.Seen(run)
		if missing := lr.Accepted.Missing(seen, nil); missing == 0 && !res.Settled {
			res.Settled = true
			res.SettleTime = time.Since(endLoad)
		}
		if (res.Settled && faultsIn == nil) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case err := <-serveErr:
			stopSeries()
			return nil, fmt.Errorf("bench: receiver: %w", err)
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if !res.Settled {
		res.SettleTime = time.Since(endLoad)
	}
	stopFaults()
	if faultsIn != nil {
		faults = <-faultsIn
	}
	stopSeries()
	<-seriesDone
	res.Receive = rcv.Report()
	if b := res.Backlog; b != nil {
		b.Refused = res.Receive.Refused
		b.Drained = res.Settled
		b.DrainTime = res.SettleTime
		if res.Settled && !res.Receive.Last.IsZero() {
			b.DrainTime = max(res.Receive.Last.Sub(endLoad), 0)
		}
		catchUp(b, res.Receive.Events-delivered0, res.Receive.Seconds)
	}
	seen := rcv.Seen(run)
	epr := uint64(max(lr.EventsPerRequest, 1))
	res.Lost = lr.Accepted.Missing(seen, func(seq uint64) {
		due, _ := pacer.Due(o.Load.Pacer, seq/epr)
		sec := int(due / time.Second)
		for len(res.LostBySecond) <= sec {
			res.LostBySecond = append(res.LostBySecond, 0)
		}
		res.LostBySecond[sec]++
	})
	res.Delivered = res.Accepted - res.Lost
	if res.Accepted > 0 {
		res.LostPct = 100 * float64(res.Lost) / float64(res.Accepted)
	}
	for len(res.LostBySecond) < len(lr.Seconds) {
		res.LostBySecond = append(res.LostBySecond, 0)
	}
	res.Faults = faults
	for i := range res.Faults {
		f := &res.Faults[i]
		if !f.Ran {
			continue
		}
		next := len(res.LostBySecond) + len(res.Receive.Seconds) + 1
		for _, g := range res.Faults {
			if g.At > f.At {
				next = min(next, int(g.At/time.Second))
			}
		}
		f.IngressRecovery, f.BacklogDrain = faultRecovery(lr.Seconds, res.Receive.Seconds, epr, f.At, next)
		for s := int(f.At / time.Second); s < next && s < len(res.LostBySecond); s++ {
			f.Lost += res.LostBySecond[s]
		}
	}
	return res, nil
}

// dialable turns a listener address into one a client can dial (":9000" → 127.0.0.1).
func dialable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// Metrics returns the values SLO objectives are judged on (latencies in ns).
func (r *Result) Metrics() map[string]float64 {
	m := map[string]float64{}
	l := r.Load
	for k, v := range latencyMap("", l.Latency) {
		m[k] = v
	}
	if r.Receive != nil && r.Receive.Latency.Count > 0 {
		for k, v := range latencyMap("e2e.", r.Receive.Latency) {
			m[k] = v
		}
	}
	m["success"] = 100 * l.Success
	m["loss"] = float64(r.Lost)
	m["loss%"] = r.LostPct
	if r.Receive != nil {
		m["dup"] = float64(r.Receive.Duplicates)
	}
	m["errors"] = float64(l.Requests - l.OK)
	m["rate"] = l.Rate
	return m
}

// latencyMap names a summary's values the way SLO keys do.
func latencyMap(prefix string, s stats.Summary) map[string]float64 {
	return map[string]float64{
		prefix + "min": float64(s.Min), prefix + "mean": float64(s.Mean),
		prefix + "p50": float64(s.P50), prefix + "p90": float64(s.P90), prefix + "p95": float64(s.P95),
		prefix + "p99": float64(s.P99), prefix + "p99.9": float64(s.P999), prefix + "p99.99": float64(s.P9999),
		prefix + "max": float64(s.Max),
	}
}
