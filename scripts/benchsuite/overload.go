package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
)

// probeInterval is how often the overload probe sends one event.
const probeInterval = 50 * time.Millisecond

// probeResult is what the overload probe saw.
type probeResult struct {
	mu         sync.Mutex
	requests   int
	rejected   []time.Duration // 429 answers
	retryAfter int             // 429s with a Retry-After header
	accepted   []time.Duration // 2xx answers
}

// probe sends one binary-mode event every probeInterval to url, on its own keep-alive
// connection, until ctx is done, timing each from the actual send to the answer.
func probe(ctx context.Context, url string, data []byte) *probeResult {
	pr := &probeResult{}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	run := "probe" + newRunID()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return pr
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
		if err != nil {
			return pr
		}
		h := req.Header
		h.Set("Content-Type", cevent.ContentTypeJSON)
		h.Set("Ce-Specversion", "1.0")
		h.Set("Ce-Id", run+"-"+strconv.Itoa(seq))
		h.Set("Ce-Source", cevent.DefaultSource)
		h.Set("Ce-Type", cevent.DefaultType)
		h.Set("Ce-Sluicerun", run)
		h.Set("Ce-Sluiceseq", strconv.Itoa(seq))
		start := time.Now()
		h.Set("Ce-Sluicesent", strconv.FormatInt(start.UnixNano(), 10))
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return pr
			}
			pr.mu.Lock()
			pr.requests++
			pr.mu.Unlock()
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		pr.mu.Lock()
		pr.requests++
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			pr.rejected = append(pr.rejected, d)
			if resp.Header.Get("Retry-After") != "" {
				pr.retryAfter++
			}
		case resp.StatusCode/100 == 2:
			pr.accepted = append(pr.accepted, d)
		}
		pr.mu.Unlock()
	}
}

// quantileMS returns the q-quantile (0…1) of ds in ms, nearest rank; 0 if empty.
func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Millisecond)
}

// meanDeliveryRate averages per-second deliveries over seconds [skip, end).
func meanDeliveryRate(perSecond []uint64, skip, end int) float64 {
	end = min(end, len(perSecond))
	if end <= skip {
		return 0
	}
	var n uint64
	for _, v := range perSecond[skip:end] {
		n += v
	}
	return float64(n) / float64(end-skip)
}

// health is what healthProbe saw: the slowest answer, which path it was and when
// (since the probing began), how many answers came and how many took 100 ms or more,
// and how many were not 200.
type health struct {
	slowest     time.Duration
	slowestPath string
	slowestAt   time.Duration
	answers     int
	over100     int
	failures    int
}

// observe counts one answer to path that took took, asked at since the probing began.
func (h *health) observe(path string, at, took time.Duration) {
	h.answers++
	if took >= 100*time.Millisecond {
		h.over100++
	}
	if took > h.slowest {
		h.slowest, h.slowestPath, h.slowestAt = took, path, at
	}
}

// healthProbe GETs /healthz, /readyz and /metrics of base every 200 ms until ctx is
// done.
func healthProbe(ctx context.Context, base string) (h health) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 3}}
	defer client.CloseIdleConnections()
	begin := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return h
		case <-tick.C:
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			start := time.Now()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			if err != nil {
				return h
			}
			resp, err := client.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					return h
				}
				h.failures++
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h.observe(path, start.Sub(begin), time.Since(start))
			if resp.StatusCode != http.StatusOK {
				h.failures++
			}
		}
	}
}

// runOverload sends factor × the sustained rate over conns connections at a fresh
// broker (t.Broker) for d, with the probes alongside, and fills an overloadResult.
func runOverload(ctx context.Context, t target, sustainedRate, factor float64, conns int, d, settle time.Duration) (*overloadResult, *bench.Result, error) {
	o := &overloadResult{SustainedRate: sustainedRate, Rate: factor * sustainedRate, Factor: factor, Connections: conns, DurationS: d.Seconds()}
	pctx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan *probeResult, 1)
	go func() { probeDone <- probe(pctx, t.URL, t.Data) }()
	// The health probe, a process of its own (healthproc.go), asks until runStep
	// returns: through the whole load, however long the broker's pushback makes it, and
	// the drain after it.
	hp, err := startHealthProbe(t.Broker.base())
	if err != nil {
		stopProbe()
		<-probeDone
		return nil, nil, err
	}
	cpu0, err := t.Broker.CPU()
	if err != nil {
		stopProbe()
		<-probeDone
		_, _ = hp.stop()
		return nil, nil, err
	}
	// The event probe stops after d: runStep's settling happens after the load ends,
	// and its events must only meet the overload.
	go func() {
		select {
		case <-time.After(d):
		case <-pctx.Done():
		}
		stopProbe()
	}()
	st, res, err := runStep(ctx, t, stepSpec{Rate: o.Rate, Duration: d, Settle: settle, Connections: conns})
	stopProbe()
	pr := <-probeDone
	h, herr := hp.stop()
	if err == nil {
		err = herr
	}
	if err != nil {
		return nil, nil, err
	}
	o.HealthMaxMS, o.HealthFailures = float64(h.slowest)/float64(time.Millisecond), h.failures
	o.HealthSlowestPath, o.HealthSlowestAtS = h.slowestPath, h.slowestAt.Seconds()
	o.HealthAnswers, o.HealthOver100 = h.answers, h.over100
	cpu1, cpuErr := t.Broker.CPU()
	if cpuErr == nil {
		o.CPUSeconds = (cpu1 - cpu0).Seconds()
	}
	l := res.Load
	o.Achieved, o.Requests, o.Accepted, o.Lost, o.Settled = l.Rate, l.Requests, res.Accepted, res.Lost, res.Settled
	for code, n := range l.StatusCodes {
		switch {
		case code == "429":
			o.Rejected429 += n
		case code == "503":
			o.Rejected503 += n
		case len(code) == 3 && code[0] == '2':
		default:
			o.OtherFailures += n
		}
	}
	o.Publish, o.E2E = st.Publish, st.E2E
	perSecond := deliveredPerSecond(res)
	o.DeliveryPerSecond = perSecond
	o.DeliveryToS = loadSeconds(res, d)
	o.DeliveryFromS = min(5, int(d/time.Second)/4)
	o.DeliveryRate = meanDeliveryRate(perSecond, o.DeliveryFromS, o.DeliveryToS)
	o.MinDeliveryRate = minDeliveryRate(perSecond, o.DeliveryFromS, o.DeliveryToS)
	pr.mu.Lock()
	o.ProbeRequests, o.Probe429, o.Probe429RetryAfter = pr.requests, len(pr.rejected), pr.retryAfter
	o.ProbeRejectP99MS, o.ProbeRejectMaxMS = quantileMS(pr.rejected, 0.99), quantileMS(pr.rejected, 1)
	o.ProbeAcceptedP99MS = quantileMS(pr.accepted, 0.99)
	pr.mu.Unlock()
	o.Alive = t.Broker.Alive()
	if o.PeakRSS, err = t.Broker.HWM(); err != nil {
		return o, res, fmt.Errorf("overload: %w", err)
	}
	return o, res, nil
}

// loadSeconds is how many whole seconds the load of res lasted, from its first
// request to its last answer, and at least planned. A broker that pushes back through
// TCP keeps the generator's requests waiting, so a load of planned × rate events can
// last several times planned; all of it is the overload (or the capacity step), and all
// of it is judged. The partial last second is left out.
func loadSeconds(res *bench.Result, planned time.Duration) int {
	d := planned
	if l := res.Load; l != nil {
		d = max(d, l.Attack+l.Wait)
	}
	return int(d / time.Second)
}

// deliveredPerSecond is the distinct events the receiver got in each second from the
// load's start.
func deliveredPerSecond(res *bench.Result) []uint64 {
	perSecond := make([]uint64, len(res.Receive.Seconds))
	for _, s := range res.Receive.Seconds {
		if s.T >= 0 && s.T < len(perSecond) {
			perSecond[s.T] = s.Events - s.Duplicates
		}
	}
	return perSecond
}

// minDeliveryRate is the lowest per-second deliveries over seconds [skip, end).
func minDeliveryRate(perSecond []uint64, skip, end int) float64 {
	end = min(end, len(perSecond))
	if end <= skip {
		return 0
	}
	m := perSecond[skip]
	for _, v := range perSecond[skip:end] {
		m = min(m, v)
	}
	return float64(m)
}
