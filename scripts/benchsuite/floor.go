package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The floor scenario: nginx `proxy_pass` to the same receiver, Debian's nginx with one
// worker and a keep-alive upstream, is the yardstick of what forwarding an HTTP request
// costs on this machine. Sluice's memory broker (one trigger) and nginx are measured side
// by side at the same rates; the verdict is the ratio of their CPU per event.

// floorLowRate is the low rate of the comparison (events/s), as the issue asks.
const floorLowRate = 5000

// floorOrder is the order of the floor's steps at each rate: 0 nginx, 1 Sluice. A
// shared machine's load drifts from minute to minute; measured in this ABBA order, a
// drift that is linear over the four steps adds as much to each side.
var floorOrder = []int{0, 1, 1, 0}

// mergeSteps sums repeated steps at one rate: CPU per event over all their accepted
// events, the lowest success, the lost summed, the mean achieved rate.
func mergeSteps(steps []stepResult) stepResult {
	var m stepResult
	var cpu float64
	m.Success = 1
	for _, st := range steps {
		cpu += st.CPUSeconds
		m.Accepted += st.Accepted
		m.Success = min(m.Success, st.Success)
		m.Lost += st.Lost
		m.Rate += st.Rate / float64(len(steps))
	}
	m.CPUSeconds = cpu
	if m.Accepted > 0 {
		m.CPUPerEventUS = 1e6 * cpu / float64(m.Accepted)
	}
	return m
}

// floorRow is one rate in one layout: nginx and Sluice at the same intended rate.
type floorRow struct {
	Layout        string  `json:"layout"` // pinned or shared
	Rate          float64 `json:"rate"`
	NginxCPUUS    float64 `json:"nginx_cpu_us_per_event"`
	SluiceCPUUS   float64 `json:"sluice_cpu_us_per_event"`
	Ratio         float64 `json:"ratio"` // Sluice / nginx
	NginxSuccess  float64 `json:"nginx_success"`
	SluiceSuccess float64 `json:"sluice_success"`
	NginxLost     uint64  `json:"nginx_lost"`
	SluiceLost    uint64  `json:"sluice_lost"`
	NginxAchieved float64 `json:"nginx_achieved_rate"`
	SluiceAchieve float64 `json:"sluice_achieved_rate"`
}

// floorResult is the floor scenario.
type floorResult struct {
	NotRun string `json:"not_run,omitempty"`
	Error  string `json:"error,omitempty"`
	Nginx  string `json:"nginx_version"`
	// NginxSustained is nginx's sustained rate (ramp in the first layout).
	NginxSustained float64      `json:"nginx_sustained_rate"`
	NginxSteps     []stepResult `json:"nginx_steps"`
	Rows           []floorRow   `json:"rows"`
	PeakRSSNginx   int64        `json:"nginx_peak_rss_bytes"`
	PeakRSSSluice  int64        `json:"sluice_peak_rss_bytes"`
}

// floor runs the floor scenario in each layout this machine allows: pinned (the proxy
// on CPU 1, generator and receiver on CPU 0) when it has two cores or more, and shared.
func (s *suite) floor(ctx context.Context) *floorResult {
	fr := &floorResult{}
	nginx, err := ensureNginx(ctx, s.logf)
	if err != nil {
		fr.NotRun = err.Error()
		return fr
	}
	if out, err := exec.Command(nginx, "-v").CombinedOutput(); err == nil {
		fr.Nginx = strings.TrimSpace(string(out))
	}
	layouts := []bool{false}
	if runtime.NumCPU() >= 2 {
		layouts = []bool{true, false}
	}
	for _, pinned := range layouts {
		if ctx.Err() != nil {
			break
		}
		if err := s.floorLayout(ctx, fr, nginx, pinned); err != nil {
			fr.Error = err.Error()
			break
		}
	}
	return fr
}

// floorLayout measures nginx and Sluice side by side in one layout; the first layout
// also ramps nginx to find its sustained rate.
func (s *suite) floorLayout(ctx context.Context, fr *floorResult, nginx string, pinned bool) error {
	layout := "shared"
	if pinned {
		layout = "pinned"
	}
	// The suite's own threads follow the layout: on CPU 0 when pinned, anywhere when
	// shared.
	restore, err := pinSelf(pinned)
	if err != nil {
		return err
	}
	defer restore()
	rcv, err := freeAddrs(1)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.tmp, "floor-"+layout)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ng, err := startNginx(ctx, nginx, dir, rcv[0], pinned)
	if err != nil {
		return err
	}
	defer ng.Stop()
	sc, _ := scenarioByName(scMemory)
	sl, err := startScenarioBroker(ctx, s.o.sluice, sc, dir, "floor", rcv, pinned)
	if err != nil {
		return err
	}
	defer sl.Stop()
	tn := target{URL: ng.ingest, Receivers: rcv, Broker: ng, Data: s.data}
	ts := target{URL: sl.ingest, Receivers: rcv, Broker: sl, Data: s.data}
	for _, t := range []target{tn, ts} {
		if _, _, err := runStep(ctx, t, stepSpec{Rate: 500, Duration: primeDuration, Settle: s.p.Settle}); err != nil {
			return fmt.Errorf("floor %s: priming: %w", layout, err)
		}
	}
	if fr.NginxSteps == nil {
		s.logf("floor: ramp nginx (%s)", layout)
		nsc := scenario{Name: "nginx", StartRate: 2000}
		if fr.NginxSteps, _, err = s.ramp(ctx, tn, nsc); err != nil {
			return fmt.Errorf("floor: nginx ramp: %w", err)
		}
		if i := sustained(fr.NginxSteps); i >= 0 {
			fr.NginxSustained = fr.NginxSteps[i].IntendedRate
		}
		if fr.NginxSustained == 0 {
			return errors.New("floor: nginx sustained no step")
		}
	}
	low := float64(floorLowRate)
	if s.o.quick {
		low = 1000
	}
	for _, rate := range []float64{low, float64(int(0.8*fr.NginxSustained + 0.5))} {
		row := floorRow{Layout: layout, Rate: rate}
		spec := stepSpec{Rate: rate, Duration: s.p.Half, Warmup: s.p.StepWarmup, Settle: s.p.Settle}
		// nginx, Sluice, Sluice, nginx: the machine's drift over the four steps weighs on
		// both alike (floorOrder).
		var steps [2][]stepResult
		for _, who := range floorOrder {
			t, name := tn, "nginx"
			if who == 1 {
				t, name = ts, "sluice"
			}
			st, _, err := runStep(ctx, t, spec)
			if err != nil {
				return fmt.Errorf("floor %s %s at %.0f/s: %w", layout, name, rate, err)
			}
			steps[who] = append(steps[who], st)
		}
		ns, ss := mergeSteps(steps[0]), mergeSteps(steps[1])
		row.NginxCPUUS, row.SluiceCPUUS = ns.CPUPerEventUS, ss.CPUPerEventUS
		row.NginxSuccess, row.SluiceSuccess = ns.Success, ss.Success
		row.NginxLost, row.SluiceLost = ns.Lost, ss.Lost
		row.NginxAchieved, row.SluiceAchieve = ns.Rate, ss.Rate
		if row.NginxCPUUS > 0 {
			row.Ratio = row.SluiceCPUUS / row.NginxCPUUS
		}
		s.logf("floor %s %.0f/s: nginx %.1f µs/ev, sluice %.1f µs/ev = %.2f×", layout, rate, row.NginxCPUUS, row.SluiceCPUUS, row.Ratio)
		fr.Rows = append(fr.Rows, row)
	}
	if hwm, err := ng.HWM(); err == nil {
		fr.PeakRSSNginx = max(fr.PeakRSSNginx, hwm)
	}
	if hwm, err := sl.HWM(); err == nil {
		fr.PeakRSSSluice = max(fr.PeakRSSSluice, hwm)
	}
	return nil
}

// nginxConfig is the floor's nginx.conf: one process (master_process off, so its CPU is
// one PID's), keep-alive to the clients and to the upstream, no logs, temp files in dir.
// max_fails=0: the receiver restarts between runs, and nginx must not mark it down for
// the stale keep-alive connections that fail then.
func nginxConfig(dir, listen, upstream string) string {
	return fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 8192; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	keepalive_requests 100000000;
	keepalive_timeout 120s;
	upstream receiver {
		server %[3]s max_fails=0;
		keepalive 1024;
		keepalive_requests 100000000;
	}
	server {
		listen %[2]s backlog=4096;
		location / {
			proxy_pass http://receiver;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
}
`, dir, listen, upstream)
}

// startNginx runs nginx with the floor's config (on CPU 1 when pinned) in its own
// process group and waits until it accepts connections. Stop it with Stop (by PID).
func startNginx(ctx context.Context, nginx, dir, upstream string, pinned bool) (*brokerProc, error) {
	addr, err := freeAddrs(1)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, addr[0], upstream)), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "nginx.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	name, args := nginx, []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	if pinned {
		name, args = "taskset", append([]string{"-c", "1", nginx}, args...)
	}
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	b := &brokerProc{cmd: cmd, logPath: logPath, exited: make(chan struct{}), ingest: "http://" + addr[0] + "/bench/floor", proxy: true}
	go func() {
		b.waitErr = cmd.Wait()
		logf.Close()
		close(b.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr[0], time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.exited:
			return nil, fmt.Errorf("nginx exited (%w): %s", b.waitErr, b.logTail())
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("nginx not listening on %s after 10s: %s", addr[0], b.logTail())
		}
	}
}

// ensureNginx returns the path of nginx, installing Debian's package with apt-get when
// it is missing (retrying while another apt holds the dpkg lock; `apt-get update` once
// if the package is unknown). Services do not start on install where policy-rc.d says
// so; the floor starts its own nginx.
func ensureNginx(ctx context.Context, logf func(string, ...any)) (string, error) {
	find := func() string {
		if p, err := exec.LookPath("nginx"); err == nil {
			return p
		}
		if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			return "/usr/sbin/nginx"
		}
		return ""
	}
	if p := find(); p != "" {
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("nginx is not installed and there is no apt-get to install it")
	}
	logf("floor: installing nginx (apt-get install -y nginx)")
	updated := false
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "nginx")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if p := find(); p != "" {
			return p, nil
		}
		msg := out.String()
		switch {
		case strings.Contains(msg, "lock"): // another helper's apt: wait and retry
			sleepCtx(ctx, 10*time.Second)
		case !updated && (strings.Contains(msg, "Unable to locate") || strings.Contains(msg, "has no installation candidate")):
			updated = true
			_ = exec.CommandContext(ctx, "apt-get", "update").Run()
		default:
			return "", fmt.Errorf("apt-get install nginx: %v: %s", err, lastPart(strings.TrimSpace(msg)))
		}
	}
	return "", errors.New("apt-get install nginx: the dpkg lock stayed held")
}
