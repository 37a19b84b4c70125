package faults

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/report"
)

// TestSoak runs only when SLUICE_SOAK is a duration (make faults sets 30m): the
// jetstream channel under steady load (SLUICE_SOAK_RATE events/s, default 1000), a toxic
// on the subscriber path switched on for one minute and off for the next (latency,
// bandwidth, reset_peer, slicer, timeout in turn), the subscriber restarted every 5
// minutes; RSS, goroutines and open file descriptors sampled every 10 s. Nothing
// accepted may be lost. With SLUICE_SOAK_DIR the report (README.md, samples.csv, plots)
// is written there.
func TestSoak(t *testing.T) {
	total, err := time.ParseDuration(os.Getenv("SLUICE_SOAK"))
	if err != nil {
		t.Skip("SLUICE_SOAK=DURATION runs the soak (make faults: 30m)")
	}
	rate := 1000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_SOAK_RATE")); err == nil && v > 0 {
		rate = v
	}
	toggle, restartEvery, sampleEvery := time.Minute, 5*time.Minute, 10*time.Second
	if total < 30*time.Minute { // a short run keeps the ratios: 30 toggles and 6 restarts per run
		toggle, restartEvery = total/30, total/6
	}

	sub := newSoakSubscriber(t)
	px := newProxy(t, "soak-subscriber", "127.0.0.1:0", sub.addr)
	cfg := writeConfig(t, brokerYAML("soak", retrying, [2]string{"sub", "http://" + px.Listen + "/"}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--data-dir", t.TempDir())
	l := startLoader(b.base+"/soak/default", "soak", "io.sluice.soak", rate, 128)

	var samples []soakSample
	start := time.Now()
	sampleTick, toggleTick, restartTick := time.NewTicker(sampleEvery), time.NewTicker(toggle), time.NewTicker(restartEvery)
	defer sampleTick.Stop()
	defer toggleTick.Stop()
	defer restartTick.Stop()
	end := time.After(total)
	var on *toxic
	next, toggles, restarts := 0, 0, 0
	sample := func(event string) {
		u := b.usage()
		samples = append(samples, soakSample{At: time.Since(start), usage: u, Accepted: l.Accepted(),
			Delivered: sub.distinct(), Event: event})
	}
	sample("start")
loop:
	for {
		select {
		case <-end:
			break loop
		case <-sampleTick.C:
			sample("")
		case <-toggleTick.C:
			toggles++
			if on != nil {
				on.remove(t, px)
				sample("toxic off: " + on.name)
				on = nil
			} else {
				x := toxics[next%len(toxics)]
				next++
				x.add(t, px)
				on = &x
				sample("toxic on: " + x.name)
			}
		case <-restartTick.C:
			restarts++
			sub.restart(t, 2*time.Second)
			sample("subscriber restarted")
		}
	}
	if on != nil {
		on.remove(t, px)
	}
	l.Stop()
	sample("load stopped")
	drainStart := time.Now()
	for sub.missing(l) > 0 && time.Since(drainStart) < 180*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	drain := time.Since(drainStart)
	sample("drained")
	lost := sub.missing(l)
	accepted, dups := l.Accepted(), sub.duplicates()
	if lost > 0 {
		t.Errorf("soak: %d of %d accepted events never delivered", lost, accepted)
	}
	// Slopes over the samples after the first fifth (warm-up), per hour.
	from := len(samples) / 5
	slope := func(f func(s soakSample) float64) float64 {
		var xs, ys []float64
		for _, s := range samples[from:] {
			xs = append(xs, s.At.Hours())
			ys = append(ys, f(s))
		}
		return leastSquares(xs, ys)
	}
	sl := soakSlopes{
		RSSMiBPerHour:     slope(func(s soakSample) float64 { return float64(s.RSS) / (1 << 20) }),
		GoroutinesPerHour: slope(func(s soakSample) float64 { return float64(s.Goroutines) }),
		FDsPerHour:        slope(func(s soakSample) float64 { return float64(s.FDs) }),
	}
	r := result{Fault: fmt.Sprintf("soak %s at %d/s: %d toxic toggles, %d subscriber restarts", total, rate, toggles, restarts),
		Path: "jetstream", Sent: l.Sent(), Accepted: accepted, Refused: l.Refusals(), Delivered: accepted - lost,
		Duplicates: dups, Lost: lost, RecoveryS: drain.Seconds(),
		Note: fmt.Sprintf("slopes: RSS %+.1f MiB/h, goroutines %+.1f/h, fds %+.1f/h", sl.RSSMiBPerHour, sl.GoroutinesPerHour, sl.FDsPerHour)}
	record(t, r)
	if dir := os.Getenv("SLUICE_SOAK_DIR"); dir != "" {
		if err := writeSoakReport(dir, total, toggle, restartEvery, rate, r, sl, samples); err != nil {
			t.Errorf("soak report: %v", err)
		}
	}
}

type soakSample struct {
	At time.Duration
	usage
	Accepted, Delivered int
	Event               string
}

type soakSlopes struct {
	RSSMiBPerHour, GoroutinesPerHour, FDsPerHour float64
}

// leastSquares is the slope of the least-squares line through (xs, ys).
func leastSquares(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// soakSubscriber is an HTTP subscriber on a fixed port that can be restarted: it counts
// deliveries per sequence number.
type soakSubscriber struct {
	addr string
	mu   sync.Mutex
	got  []uint8
	srv  *http.Server
	wg   sync.WaitGroup
}

func newSoakSubscriber(t *testing.T) *soakSubscriber {
	s := &soakSubscriber{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	s.listen(t)
	t.Cleanup(func() {
		_ = s.srv.Close()
		s.wg.Wait()
	})
	return s
}

func (s *soakSubscriber) listen(t *testing.T) {
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after the previous server closed
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("subscriber listen: %v", err)
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	srv := s.srv
	s.wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("subscriber: %v", err)
		}
	})
}

func (s *soakSubscriber) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n, err := strconv.Atoi(strings.TrimPrefix(r.Header.Get("ce-id"), "soak-"))
	if err != nil || n < 0 {
		http.Error(w, "bad ce-id", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for len(s.got) <= n {
		s.got = append(s.got, 0)
	}
	if s.got[n] < 255 {
		s.got[n]++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// restart closes the server (and its connections), waits down, and listens again.
func (s *soakSubscriber) restart(t *testing.T, down time.Duration) {
	_ = s.srv.Close()
	time.Sleep(down)
	s.listen(t)
}

func (s *soakSubscriber) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.got {
		if c > 0 {
			n++
		}
	}
	return n
}

func (s *soakSubscriber) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.got {
		if c > 1 {
			n += int(c) - 1
		}
	}
	return n
}

// missing counts the accepted sequence numbers never delivered.
func (s *soakSubscriber) missing(l loader) int {
	acc := l.AcceptedBefore(time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, i := range acc {
		if i >= uint64(len(s.got)) || s.got[i] == 0 {
			n++
		}
	}
	return n
}

// writeSoakReport writes README.md (the result, the slopes, the events), samples.csv and
// PNG plots drawn by loadtest/report into dir.
func writeSoakReport(dir string, total, toggle, restartEvery time.Duration, rate int, r result, sl soakSlopes, samples []soakSample) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var csv bytes.Buffer
	csv.WriteString("seconds,rss_bytes,goroutines,fds,accepted,delivered,event\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.0f,%d,%d,%d,%d,%d,%q\n", s.At.Seconds(), s.RSS, s.Goroutines, s.FDs, s.Accepted, s.Delivered, s.Event)
	}
	if err := os.WriteFile(filepath.Join(dir, "samples.csv"), csv.Bytes(), 0o644); err != nil {
		return err
	}
	// report.RenderPNG puts y[i] at x = i seconds: hold each sample until the next.
	perSecond := func(f func(s soakSample) float64) []float64 {
		var ys []float64
		for i, s := range samples {
			until := s.At
			if i+1 < len(samples) {
				until = samples[i+1].At
			}
			for x := len(ys); time.Duration(x)*time.Second <= until; x++ {
				ys = append(ys, f(s))
			}
		}
		return ys
	}
	charts := []report.Chart{
		{File: "soak-rss.png", Title: "Sluice RSS", YLabel: "MiB", Lines: []report.Series{
			{Name: "RSS", Y: perSecond(func(s soakSample) float64 { return float64(s.RSS) / (1 << 20) })}}},
		{File: "soak-goroutines-fds.png", Title: "Sluice goroutines and open file descriptors", YLabel: "count", Lines: []report.Series{
			{Name: "goroutines", Y: perSecond(func(s soakSample) float64 { return float64(s.Goroutines) })},
			{Name: "fds", Y: perSecond(func(s soakSample) float64 { return float64(s.FDs) })}}},
		{File: "soak-backlog.png", Title: "accepted but not yet delivered", YLabel: "events", Lines: []report.Series{
			{Name: "backlog", Y: perSecond(func(s soakSample) float64 { return float64(s.Accepted - s.Delivered) })}}},
	}
	for _, c := range charts {
		png, err := report.RenderPNG(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.File), png, 0o644); err != nil {
			return err
		}
	}
	var md bytes.Buffer
	label := ""
	if total < 30*time.Minute {
		label = " — SHORT RUN (make faults runs 30m)"
	}
	fmt.Fprintf(&md, "# Soak: jetstream channel, %s at %d events/s%s\n\n", total, rate, label)
	fmt.Fprintf(&md, "`SLUICE_SOAK=%s SLUICE_SOAK_RATE=%d go test -run TestSoak -timeout 0 ./test/faults/` (make faults runs 30m). ", total, rate)
	fmt.Fprintf(&md, "A toxic on the Sluice→subscriber path is switched on for %s and off for the next %s (latency, bandwidth, reset_peer, slicer, timeout in turn); the subscriber is restarted (down 2 s) every %s; RSS, goroutines and open file descriptors are sampled every 10 s. Other jobs shared the machine's 2 cores.\n\n", toggle, toggle, restartEvery)
	md.WriteString("| sent | accepted | refused | delivered | duplicates | lost | drain after load |\n| ---: | ---: | --- | ---: | ---: | ---: | ---: |\n")
	fmt.Fprintf(&md, "| %d | %d | %s | %d | %d | %d | %.1f s |\n\n", r.Sent, r.Accepted, dash(r.Refused), r.Delivered, r.Duplicates, r.Lost, r.RecoveryS)
	md.WriteString("Slopes (least squares over the samples after the first fifth, per hour):\n\n| RSS | goroutines | open fds |\n| ---: | ---: | ---: |\n")
	fmt.Fprintf(&md, "| %+.1f MiB/h | %+.1f /h | %+.1f /h |\n\n", sl.RSSMiBPerHour, sl.GoroutinesPerHour, sl.FDsPerHour)
	for _, c := range charts {
		fmt.Fprintf(&md, "![%s](%s)\n\n", c.Title, c.File)
	}
	md.WriteString("Events (every sample is in [samples.csv](samples.csv)):\n\n| t (s) | event | RSS MiB | goroutines | fds |\n| ---: | --- | ---: | ---: | ---: |\n")
	for _, s := range samples {
		if s.Event != "" {
			fmt.Fprintf(&md, "| %.0f | %s | %d | %d | %d |\n", s.At.Seconds(), s.Event, s.RSS>>20, s.Goroutines, s.FDs)
		}
	}
	return os.WriteFile(filepath.Join(dir, "soak.md"), md.Bytes(), 0o644)
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
