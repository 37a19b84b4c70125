package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// replica is one running `sluice serve`.
type replica struct {
	t      *testing.T
	n      int
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	logs   *syncBuffer
	exited chan error
	dead   atomic.Bool
}

// syncBuffer is the log of a process or server that the test reads while it runs.
type syncBuffer = syncbuf.Buffer

// startReplica runs `sluice serve` on a free port with args and waits until /readyz
// answers 200. It is stopped with SIGTERM when the test ends, if still running.
func startReplica(t *testing.T, n int, args ...string) *replica {
	t.Helper()
	sv := sluicetest.Start(t, sluiceBin, 30*time.Second, args...)
	r := &replica{t: t, n: n, cmd: sv.Cmd, base: sv.Base, logs: sv.Logs, exited: sv.Exited}
	t.Cleanup(func() {
		if !r.dead.Load() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(30 * time.Second):
				_ = r.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("replica %d logs:\n%s", n, r.logs)
		}
	})
	if err := sluicetest.WaitReady(r.base, 30*time.Second); err != nil {
		t.Fatalf("replica %d: %v\n%s", n, err, r.logs)
	}
	return r
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *replica) kill() {
	r.dead.Store(true)
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// metric sums the samples of the Prometheus metric lines starting with prefix; -1 when
// the replica does not answer.
func (r *replica) metric(prefix string) float64 {
	v, err := sluicetest.Metric(r.base, prefix)
	if err != nil {
		return -1
	}
	return v
}

// fault is something done to the system mid-load: at After from the start of the load.
type fault struct {
	After time.Duration
	Name  string
	Do    func(t *testing.T, replicas []*replica)
}

// killReplica is the fault that kills replica i with SIGKILL.
func killReplica(i int) func(*testing.T, []*replica) {
	return func(_ *testing.T, rs []*replica) { rs[i].kill() }
}

// replicaTest is one run: Replicas `sluice serve` processes with Args, a trigger whose
// subscriber records every delivery (taking Latency each, so that replicas hold events
// in flight when killed), Rate events/s of 2 KiB for Load spread over the live replicas,
// and Faults applied during the load.
type replicaTest struct {
	Namespace string
	Args      []string
	Replicas  int
	Rate      int
	Load      time.Duration
	Latency   time.Duration
	Faults    []fault
	// Recovery bounds the wait, after the load, for every accepted event to arrive.
	Recovery time.Duration
}

// run runs rt and checks that every event that got a 202 from any replica was
// delivered (duplicates allowed and counted). It logs accepted, delivered, duplicates,
// and per fault the takeover time (from the fault until the last delivery of an event
// accepted before it: the redelivery of what a killed replica held) and the ingress gap
// (the longest time without a 202 after it). It returns the replicas.
func (rt replicaTest) run(t *testing.T) []*replica {
	type delivery struct {
		n           int
		first, last time.Time
	}
	var (
		rmu sync.Mutex
		got = map[int]*delivery{}
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.Header.Get("ce-id"))
		if err != nil {
			http.Error(w, "bad ce-id", http.StatusBadRequest)
			return
		}
		time.Sleep(rt.Latency)
		rmu.Lock()
		d := got[id]
		if d == nil {
			d = &delivery{first: time.Now()}
			got[id] = d
		}
		d.n++
		d.last = time.Now()
		rmu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer recv.Close()

	cfg := sluicetest.WriteConfig(t, sluicetest.BrokerYAML(rt.Namespace, "{retry: 1000, backoffPolicy: linear, backoffDelay: PT0.05S}",
		sluicetest.Trigger{Name: "shared", URI: recv.URL}))
	args := append([]string{"--config", cfg, "--shutdown-timeout", "5s"}, rt.Args...)
	replicas := make([]*replica, rt.Replicas)
	for i := range replicas {
		replicas[i] = startReplica(t, i+1, args...)
	}
	path := "/" + rt.Namespace + "/default"

	// The load: rate events/s of 2 KiB from 256 workers (sluicetest.Load); event n goes
	// to replica n%N first and, like a load balancer, to the next live one when refused.
	data := bytes.Repeat([]byte("x"), 2048)
	client := sluicetest.NewClient(256, 10*time.Second)
	post := func(n uint64) sluicetest.Answer {
		var last sluicetest.Answer // no live replica: no answer
		for k := range rt.Replicas {
			r := replicas[(int(n)+k)%rt.Replicas]
			if r.dead.Load() {
				continue
			}
			p := sluicetest.Poster{Client: client, URL: r.base + path, Type: "io.sluice.cluster", Source: "/cluster-test", Data: data}
			if last = p.Send(n); last.Status == http.StatusAccepted {
				break
			}
		}
		return last
	}
	start := time.Now()
	faultAt := make([]time.Time, len(rt.Faults))
	var fwg sync.WaitGroup
	fwg.Go(func() {
		for i, f := range rt.Faults {
			time.Sleep(time.Until(start.Add(f.After)))
			faultAt[i] = time.Now()
			t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), f.Name)
			f.Do(t, replicas)
		}
	})
	l := sluicetest.Load{Pacer: pacer.Constant{Rate: float64(rt.Rate), Duration: rt.Load}, Workers: 256, Send: post}.Start(context.Background())
	l.Wait()
	fwg.Wait()
	loadEnd := time.Now()
	accepted := map[int]time.Time{} // event -> when its 202 came
	perSecond := make([]int, int(rt.Load/time.Second)+1)
	for _, a := range l.Acceptances(time.Time{}) {
		accepted[int(a.N)] = a.At
		if i := int(a.At.Sub(start) / time.Second); i >= 0 && i < len(perSecond) {
			perSecond[i]++
		}
	}
	total, sent := len(accepted), l.Sent()
	t.Logf("load: %d sent over %s (%d skipped: every worker busy), %d accepted (per second: %v), %d refused by every live replica",
		sent, rt.Load, l.Skipped(), total, perSecond, sent-total)
	// A share of what the generator managed to send (a loaded machine sends fewer), not
	// of what it was asked to.
	if total == 0 || total < sent/4 {
		t.Fatalf("only %d events accepted of %d sent", total, sent)
	}

	deadline := loadEnd.Add(rt.Recovery)
	for {
		rmu.Lock()
		missing, dups, delivered := 0, 0, 0
		for id := range accepted {
			if got[id] == nil {
				missing++
			}
		}
		for _, d := range got {
			delivered++
			dups += d.n - 1
		}
		if missing == 0 {
			takeovers := make([]string, len(rt.Faults))
			for i, f := range rt.Faults {
				// takeover: from the fault until the last delivery (first or again) of an
				// event accepted before it; the ingress gap: the longest time without a 202
				// in the 20 s after it.
				var last time.Time
				var after []time.Time
				for id, at := range accepted {
					if at.Before(faultAt[i]) && got[id].last.After(last) {
						last = got[id].last
					}
					if !at.Before(faultAt[i]) && at.Before(faultAt[i].Add(20*time.Second)) {
						after = append(after, at)
					}
				}
				slices.SortFunc(after, time.Time.Compare)
				gap, prev := time.Duration(0), faultAt[i]
				for _, at := range after {
					gap, prev = max(gap, at.Sub(prev)), at
				}
				takeovers[i] = fmt.Sprintf("%s: takeover %s, ingress gap %s", f.Name,
					max(0, last.Sub(faultAt[i])).Round(10*time.Millisecond), gap.Round(10*time.Millisecond))
			}
			rmu.Unlock()
			var shares []string
			for _, r := range replicas {
				if !r.dead.Load() {
					shares = append(shares, fmt.Sprintf("replica %d: %.0f", r.n, r.metric("sluice_delivery_delivered_total")))
				}
			}
			t.Logf("RESULT accepted=%d delivered=%d duplicates=%d lost=0 all delivered %s after the load; %s; deliveries by live replicas: %s",
				total, delivered, dups, time.Since(loadEnd).Round(10*time.Millisecond), strings.Join(takeovers, ", "), strings.Join(shares, ", "))
			for _, r := range replicas {
				if !r.dead.Load() && r.metric("sluice_delivery_delivered_total") <= 0 {
					t.Errorf("replica %d delivered nothing: the trigger's work is not shared", r.n)
				}
			}
			return replicas
		}
		rmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("LOST: %d of %d accepted events never delivered within %s of the load's end (%d duplicates)",
				missing, total, rt.Recovery, dups)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
