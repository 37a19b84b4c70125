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
}

// Run executes a bench run.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.ReceiverAddr == "" {
		o.ReceiverAddr = "127.0.0.1:9000"
	}
	if o.Settle <= 0 {
		o.Settle = 10 * time.Second
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
	o.Load.TrackAccepted = true
	o.Load.Progress = o.Progress
	o.Load.OnStart = func(start time.Time) {
		go func() { rcv.Series(seriesCtx, start); close(seriesDone) }()
	}
	lr, err := load.Run(ctx, o.Load)
	if err != nil {
		stopSeries()
		return nil, fmt.Errorf("bench: %w", err)
	}
	res := &Result{Load: lr, Accepted: lr.Accepted.Len()}
	// Settle: wait until the receiver has every accepted event, or the timeout.
	run := o.Load.Template.Run
	endLoad := time.Now()
	deadline := endLoad.Add(o.Settle)
	for {
		seen := rcv.Seen(run)
		if lr.Accepted.Missing(seen, nil) == 0 {
			res.Settled = true
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
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
	res.SettleTime = time.Since(endLoad)
	stopSeries()
	<-seriesDone
	res.Receive = rcv.Report()
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
