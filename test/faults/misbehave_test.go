package faults

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// rawServer accepts TCP connections on 127.0.0.1 and hands each to serve; it counts
// requests (serve's calls) and closes every connection when the test ends.
type rawServer struct {
	ln    net.Listener
	calls atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newRawServer(t *testing.T, serve func(c net.Conn, r *http.Request)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					s.calls.Add(1)
					serve(c, r)
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() + "/" }

// deadLetters records the dead-letter events per failed destination and id, with their
// knativeerrorcode.
type deadLetters struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]map[string]string // dest → id → code
}

func newDeadLetters(t *testing.T) *deadLetters {
	d := &deadLetters{got: map[string]map[string]string{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		dest := r.Header.Get("ce-knativeerrordest")
		if d.got[dest] == nil {
			d.got[dest] = map[string]string{}
		}
		d.got[dest][r.Header.Get("ce-id")] = r.Header.Get("ce-knativeerrorcode")
		d.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(d.Close)
	return d
}

// of returns how many of ids were dead-lettered from dest, and the codes seen.
func (d *deadLetters) of(dest string, ids []string) (int, map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	codes := map[string]int{}
	n := 0
	for _, id := range ids {
		if c, ok := d.got[dest][id]; ok {
			n++
			codes[c]++
		}
	}
	return n, codes
}

// timedSink is a sink that also remembers when each id first arrived.
type timedSink struct {
	*sink
	mu    sync.Mutex
	first map[string]time.Time
}

func newTimedSink(t *testing.T) *timedSink {
	ts := &timedSink{sink: &sink{got: map[string]int{}}, first: map[string]time.Time{}}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("ce-id")
		ts.sink.mu.Lock()
		ts.got[id]++
		ts.sink.mu.Unlock()
		ts.mu.Lock()
		if _, ok := ts.first[id]; !ok {
			ts.first[id] = time.Now()
		}
		ts.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// within counts the ids accepted before end that arrived within grace after it, and
// gives the p99 of accept → arrival among them.
func (ts *timedSink) within(l loader, end time.Time) (n int, p99 time.Duration) {
	by := end.Add(windowGrace)
	acc := l.Acceptances(time.Time{})
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var lat []time.Duration
	for _, a := range acc {
		if a.At.After(end) {
			continue
		}
		if at, ok := ts.first[l.id(a.N)]; ok && !at.After(by) {
			n++
			lat = append(lat, at.Sub(a.At))
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p99 = lat[len(lat)*99/100]
	}
	return n, p99
}

// windowGrace is how long after the load window an event accepted in it may arrive and
// still count toward the window's delivery rate: room for a loaded machine's latency.
const windowGrace = time.Second

// misbehaviours are the subscribers of issue 14 that do not behave, each with the
// outcome Sluice must give its events: dead-lettered with a code, or delivered.
type misbehaviour struct {
	name     string
	serve    func(c net.Conn, r *http.Request)
	deadCode string // knativeerrorcode every event must be dead-lettered with; "" = delivered
	attempts int    // attempts per event, when it is exact (0: not checked)
}

// replyBytes counts what the 2 GB replier managed to write.
var replyBytes atomic.Int64

func misbehaviours() []misbehaviour {
	return []misbehaviour{
		{name: "never answers", deadCode: "500", serve: func(c net.Conn, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.Copy(io.Discard, c) // until Sluice gives up and closes
		}},
		{name: "1 byte/s", deadCode: "500", serve: func(c net.Conn, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}},
		{name: "reset after half the body", deadCode: "500", serve: func(c net.Conn, r *http.Request) {
			_, _ = io.CopyN(io.Discard, r.Body, r.ContentLength/2)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
			c.Close()
		}},
		{name: "2 GB reply body", serve: func(c net.Conn, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 2147483648\r\n\r\n")
			chunk := make([]byte, 64<<10)
			for sent := int64(0); sent < 2<<30; sent += int64(len(chunk)) {
				if _, err := c.Write(chunk); err != nil {
					c.Close()
					return
				}
				replyBytes.Add(int64(len(chunk)))
			}
		}},
		{name: "redirect", deadCode: "302", attempts: 1, serve: func(c net.Conn, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n")
		}},
	}
}

// TestMisbehavingSubscribers runs a well-behaved trigger beside one trigger per
// misbehaving subscriber (embedded JetStream, 3 attempts of at most 1 s each, a
// dead-letter sink) under steady load, after a baseline run with the good trigger
// alone. Each misbehaving trigger's events get the right outcome, Sluice's memory and
// goroutines stay bounded and come back down, and the good trigger gets every event it
// accepted. Its share delivered within the load window, beside the misbehaving ones and
// alone, is recorded, not judged: the machine's load sets it.
func TestMisbehavingSubscribers(t *testing.T) {
	// The good trigger gets rate events/s; each misbehaving one badRate/s of another type.
	// A subscriber that never answers drives the trigger's adaptive in-flight limit to 1
	// (a timeout is a congestion signal, docs/delivery.md), so its events are
	// dead-lettered one at a time, 3 attempts × 1 s each: badRate stays small.
	const rate, badRate, badType = 100, 2, "io.sluice.faults.bad"
	load := 5 * time.Second
	if long {
		load = 30 * time.Second
	}
	policy := "{retry: 2, backoffPolicy: linear, backoffDelay: PT0.1S, timeout: PT1S, deadLetterSink: {uri: %q}}"

	// Baseline: the good trigger alone.
	good := newTimedSink(t)
	dl := newDeadLetters(t)
	cfg := writeConfig(t, brokerYAML("base", fmt.Sprintf(policy, dl.URL), [2]string{"good", good.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--data-dir", t.TempDir())
	l := startFaultLoad(b.base+"/base/default", "base", rate)
	time.Sleep(load)
	end := time.Now()
	l.Stop()
	time.Sleep(windowGrace)
	baseN, baseP99 := good.within(l, end)
	baseAccepted := len(l.acceptedIDs(end))
	b.stop(20 * time.Second)

	// The same with every misbehaving subscriber beside it.
	good2 := newTimedSink(t)
	ms := misbehaviours()
	servers := make([]*rawServer, len(ms))
	triggers := []sluicetest.Trigger{{Name: "good", URI: good2.URL}}
	for i, m := range ms {
		servers[i] = newRawServer(t, m.serve)
		triggers = append(triggers, sluicetest.Trigger{Name: fmt.Sprintf("bad%d", i), Type: badType, URI: servers[i].url()})
	}
	cfg = writeConfig(t, sluicetest.BrokerYAML("bad", fmt.Sprintf(policy, dl.URL), triggers...))
	b = startSluice(t, "--config", cfg, "--channel", "jetstream", "--data-dir", t.TempDir())
	idle := b.usage()
	l = startFaultLoad(b.base+"/bad/default", "bad", rate)
	lb := startLoader(b.base+"/bad/default", "misbehave", badType, badRate, 64)
	var peak usage
	sample := func() {
		u := b.usage()
		peak.RSS, peak.Goroutines, peak.FDs = max(peak.RSS, u.RSS), max(peak.Goroutines, u.Goroutines), max(peak.FDs, u.FDs)
	}
	for deadline := time.Now().Add(load); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		sample()
	}
	end = time.Now()
	l.Stop()
	lb.Stop()
	time.Sleep(windowGrace)
	n, p99 := good2.within(l, end)
	accepted := l.acceptedIDs(time.Time{})
	acceptedBy := len(l.acceptedIDs(end))
	badAccepted := lb.acceptedIDs(time.Time{})

	// Every misbehaving trigger's events reach their outcome.
	for i, m := range ms {
		// At an in-flight limit of 1, 3 attempts of 1 s each per event (see badRate).
		deadline := time.Now().Add(30*time.Second + time.Duration(len(badAccepted))*3500*time.Millisecond)
		var got int
		var codes map[string]int
		for time.Now().Before(deadline) {
			sample()
			got, codes = dl.of(servers[i].url(), badAccepted)
			if m.deadCode == "" || got == len(badAccepted) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		calls := int(servers[i].calls.Load())
		r := result{Fault: m.name, Path: "sluice→subscriber", Sent: lb.Sent(), Accepted: len(badAccepted),
			Refused: lb.Refusals(), Delivered: got,
			Note: fmt.Sprintf("dead-lettered %d (codes %v), %d attempts", got, codes, calls)}
		switch {
		case m.deadCode != "" && (got != len(badAccepted) || codes[m.deadCode] != got):
			t.Errorf("%s: %d of %d accepted events dead-lettered, codes %v, want all with %s", m.name, got, len(badAccepted), codes, m.deadCode)
		case m.deadCode == "" && got != 0:
			t.Errorf("%s: %d events dead-lettered (codes %v), want them delivered", m.name, got, codes)
		case m.attempts > 0 && calls != m.attempts*len(badAccepted):
			t.Errorf("%s: %d attempts for %d events, want %d each", m.name, calls, len(badAccepted), m.attempts)
		}
		if m.deadCode == "" {
			r.Delivered = calls
			r.Note = fmt.Sprintf("%d attempts, %d MiB of reply written by the subscriber before Sluice hung up", calls, replyBytes.Load()>>20)
			if calls < len(badAccepted) {
				t.Errorf("%s: %d attempts for %d events", m.name, calls, len(badAccepted))
			}
		}
		r.Lost = len(badAccepted) - r.Delivered
		if m.deadCode == "" && r.Lost < 0 {
			r.Lost = 0
		}
		record(t, r)
	}
	if _, ok := good2.waitAll(accepted, 60*time.Second); !ok {
		t.Error("the good trigger did not get every accepted event")
	}
	// The 2 GB replies must not have been read to their end.
	if perEvent := replyBytes.Load() / int64(max(len(badAccepted), 1)); perEvent > 8<<20 {
		t.Errorf("Sluice read %d bytes of reply per event", perEvent)
	}
	time.Sleep(12 * time.Second) // idle workers leave after 10 s
	rest := b.usage()
	t.Logf("usage idle %+v, peak %+v, after %+v", idle, peak, rest)
	if peak.RSS > 1<<30 {
		t.Errorf("RSS peaked at %d MiB", peak.RSS>>20)
	}
	if rest.Goroutines > idle.Goroutines+100 {
		t.Errorf("goroutines %d after the load, %d before it", rest.Goroutines, idle.Goroutines)
	}
	baseRate := float64(baseN) / float64(max(baseAccepted, 1))
	besideRate := float64(n) / float64(max(acceptedBy, 1))
	record(t, result{Fault: "good trigger beside the 5 above", Path: "sluice→subscriber", Sent: l.Sent(),
		Accepted: len(accepted), Delivered: len(accepted),
		Note: fmt.Sprintf("delivered within the load window: %.1f%% (alone: %.1f%%); p99 accept→delivery %s (alone: %s); RSS peak %d MiB, goroutines idle/peak/after %d/%d/%d",
			100*besideRate, 100*baseRate, p99.Round(time.Millisecond), baseP99.Round(time.Millisecond), peak.RSS>>20, idle.Goroutines, peak.Goroutines, rest.Goroutines)})
}
