// Package agent runs `sluice load` across several machines: an Agent is an HTTP
// server that runs its share of a schedule on request, and Run is the controller that
// measures each agent's clock skew, starts them together, collects their results and
// merges them into one load.Result.
//
// The schedule is split by hit number: agent i of n sends hits i, i+n, i+2n, …, so each
// sends at rate R/n on the schedule's own timing and the run's sequence numbers stay
// unique across agents (receivers account for loss and duplicates as for one sender).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Spec is the run an agent is asked to make: the `sluice load` flags, its share of
// the schedule and the common start time, in the agent's clock.
type Spec struct {
	Target      string        `json:"target"`
	Rate        float64       `json:"rate"`
	Duration    time.Duration `json:"duration_ns"`
	Pace        string        `json:"pace,omitempty"`
	Ramp        string        `json:"ramp,omitempty"`
	Warmup      time.Duration `json:"warmup_ns"`
	Data        []byte        `json:"data,omitempty"`
	Mode        string        `json:"mode"`
	BatchSize   int           `json:"batch_size"`
	Connections int           `json:"connections"`
	Timeout     time.Duration `json:"timeout_ns"`
	Type        string        `json:"type"`
	Source      string        `json:"source"`
	Run         string        `json:"run_id"`
	Insecure    bool          `json:"insecure,omitempty"`
	StdClient   bool          `json:"std_client,omitempty"`
	Headers     []string      `json:"headers,omitempty"`

	ShareIndex int       `json:"share_index"`
	ShareOf    int       `json:"share_of"`
	StartAt    time.Time `json:"start_at"`
}

// Result is an agent's load.Result with its histograms encoded (HdrHistogram's
// compressed V2 format, base64) so the controller can merge them exactly.
type Result struct {
	*load.Result
	HistEncoded    string `json:"hist"`
	LagHistEncoded string `json:"lag_hist"`
}

// Status is what GET /status answers.
type Status struct {
	State string `json:"state"` // idle, running, done or failed
	Error string `json:"error,omitempty"`
}

// Agent states.
const (
	StateIdle    = "idle"
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// Bounds of POST /run.
const (
	// MaxSpecBytes bounds the body (the event data travels in it).
	MaxSpecBytes = 8 << 20
	// MaxStartAhead bounds how far in the future a run may be told to start.
	MaxStartAhead = time.Minute
)

// Agent is the HTTP handler of `sluice load --agent`. It runs one schedule at a time:
// POST /run while a run is in progress answers 409. GET /time answers the agent's
// clock, GET /status the state, GET /result the last result. POST /stop ends the run in
// progress (the controller's when it is stopped or gives up): its result covers what
// was sent until then.
type Agent struct {
	build func(Spec) (load.Options, error)
	ctx   context.Context
	mux   *http.ServeMux

	mu     sync.Mutex
	state  string
	err    string
	result []byte
	stop   context.CancelFunc // ends the run in progress; nil when none
}

// New returns an Agent. build turns a Spec into load options (the CLI's flag parser);
// runs stop when ctx is cancelled.
func New(ctx context.Context, build func(Spec) (load.Options, error)) *Agent {
	a := &Agent{build: build, ctx: ctx, mux: http.NewServeMux(), state: StateIdle}
	a.mux.HandleFunc("GET /time", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]int64{"now_ns": time.Now().UnixNano()})
	})
	a.mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		st := Status{State: a.state, Error: a.err}
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	})
	a.mux.HandleFunc("GET /result", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.state != StateDone {
			writeJSON(w, http.StatusConflict, Status{State: a.state, Error: a.err})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(a.result)
	})
	a.mux.HandleFunc("POST /run", a.start)
	a.mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		if a.stop != nil {
			a.stop()
		}
		st := Status{State: a.state, Error: a.err}
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	})
	return a
}

// ServeHTTP implements http.Handler.
func (a *Agent) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func (a *Agent) start(w http.ResponseWriter, r *http.Request) {
	var spec Spec
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxSpecBytes))
	if err := dec.Decode(&spec); err != nil {
		writeJSON(w, http.StatusBadRequest, Status{Error: fmt.Sprintf("run spec (at most %d bytes): %v", MaxSpecBytes, err)})
		return
	}
	if time.Until(spec.StartAt) > MaxStartAhead {
		writeJSON(w, http.StatusBadRequest, Status{Error: fmt.Sprintf("start_at %s: more than %v ahead", spec.StartAt.Format(time.RFC3339), MaxStartAhead)})
		return
	}
	if spec.ShareOf < 1 || spec.ShareIndex < 0 || spec.ShareIndex >= spec.ShareOf {
		writeJSON(w, http.StatusBadRequest, Status{Error: fmt.Sprintf("share_index %d / share_of %d: want 0 ≤ index < of", spec.ShareIndex, spec.ShareOf)})
		return
	}
	o, err := a.build(spec)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Status{Error: err.Error()})
		return
	}
	a.mu.Lock()
	if a.state == StateRunning {
		a.mu.Unlock()
		writeJSON(w, http.StatusConflict, Status{State: StateRunning, Error: "a run is in progress"})
		return
	}
	ctx, stop := context.WithCancel(a.ctx)
	a.state, a.err, a.result, a.stop = StateRunning, "", nil, stop
	a.mu.Unlock()
	go a.run(ctx, o)
	writeJSON(w, http.StatusAccepted, Status{State: StateRunning})
}

func (a *Agent) run(ctx context.Context, o load.Options) {
	res, err := load.Run(ctx, o)
	var body []byte
	if err == nil {
		body, err = encodeResult(res)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stop()
	a.stop = nil
	if err != nil {
		a.state, a.err = StateFailed, err.Error()
		return
	}
	a.state, a.result = StateDone, body
}

func encodeResult(res *load.Result) ([]byte, error) {
	h, err := res.Hist.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	l, err := res.LagHist.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	return json.Marshal(Result{Result: res, HistEncoded: string(h), LagHistEncoded: string(l)})
}

// decode restores the histograms of a Result read from an agent.
func (r *Result) decode() error {
	if r.Result == nil {
		return errors.New("empty result")
	}
	var err error
	if r.Hist, err = decodeHist("latency", r.HistEncoded); err != nil {
		return err
	}
	r.LagHist, err = decodeHist("lag", r.LagHistEncoded)
	return err
}

// decodeHist decodes an agent's histogram and refuses one whose range or precision is
// not stats.NewHist's: merging it would drop the values outside the range, or blur them.
func decodeHist(what, encoded string) (*hdrhistogram.Histogram, error) {
	h, err := hdrhistogram.Decode([]byte(encoded))
	if err != nil {
		return nil, fmt.Errorf("%s histogram: %w", what, err)
	}
	want := stats.NewHist()
	if h.LowestTrackableValue() != want.LowestTrackableValue() || h.HighestTrackableValue() != want.HighestTrackableValue() ||
		h.SignificantFigures() != want.SignificantFigures() {
		return nil, fmt.Errorf("%s histogram: range %d–%d µs at %d significant digits, want %d–%d at %d (an agent of another version?)", what,
			h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures(),
			want.LowestTrackableValue(), want.HighestTrackableValue(), want.SignificantFigures())
	}
	return h, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
