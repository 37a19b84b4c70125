package load

import (
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/stats"
)

// maxErrorKinds bounds the error set, so a target failing with a new message on every
// request cannot grow memory without bound.
const maxErrorKinds = 64

// recorder accumulates results. Workers record under one mutex held for well under a
// microsecond (a few counter updates and two HDR histogram increments), which on a few
// cores costs less than per-worker histograms merged per second would.
type recorder struct {
	mu sync.Mutex

	total   *hdrhistogram.Histogram // measured requests (warm-up excluded)
	second  *hdrhistogram.Histogram // completions in the current second
	lag     *hdrhistogram.Histogram // dispatch lag: actual − intended send time
	steps   []stepAcc               // per schedule step, by intended time
	stepEnd []time.Duration         // offsets where steps end (warm-up included)

	requests, ok, bytesIn, bytesOut uint64
	codes                           map[int]uint64
	errs                            map[string]uint64
	firstSent, lastSent, lastDone   time.Time
	accepted                        *stats.Bitset // events acknowledged with 2xx (warm-up included)
	eventsPerReq                    uint64

	secDone, secOK, secFailed uint64
}

type stepAcc struct {
	hist         *hdrhistogram.Histogram
	requests, ok uint64
	first, last  time.Time
}

func newRecorder(stepEnd []time.Duration, eventsPerReq int, trackAccepted bool) *recorder {
	r := &recorder{
		total:        stats.NewHist(),
		second:       stats.NewHist(),
		lag:          stats.NewHist(),
		stepEnd:      stepEnd,
		codes:        map[int]uint64{},
		errs:         map[string]uint64{},
		eventsPerReq: uint64(eventsPerReq),
	}
	if len(stepEnd) > 1 {
		r.steps = make([]stepAcc, len(stepEnd))
		for i := range r.steps {
			r.steps[i].hist = stats.NewHist()
		}
	}
	if trackAccepted {
		r.accepted = &stats.Bitset{}
	}
	return r
}

// result is what one request produced.
type result struct {
	seq                  uint64
	due                  time.Duration // intended offset from start
	intended, sent, done time.Time
	status               int
	err                  error
	bytesIn, bytesOut    int64
	warmup               bool
}

func (r *recorder) record(x *result) {
	success := x.err == nil && x.status >= 200 && x.status < 300
	lat := x.done.Sub(x.intended)
	r.mu.Lock()
	defer r.mu.Unlock()
	if success && r.accepted != nil {
		for i := uint64(0); i < r.eventsPerReq; i++ {
			r.accepted.Add(x.seq + i)
		}
	}
	r.secDone++
	if success {
		r.secOK++
	} else {
		r.secFailed++
	}
	stats.Record(r.second, lat)
	if x.done.After(r.lastDone) {
		r.lastDone = x.done
	}
	if x.warmup {
		return
	}
	stats.Record(r.total, lat)
	stats.Record(r.lag, x.sent.Sub(x.intended))
	r.requests++
	r.bytesIn += uint64(x.bytesIn)
	r.bytesOut += uint64(x.bytesOut)
	if r.firstSent.IsZero() || x.sent.Before(r.firstSent) {
		r.firstSent = x.sent
	}
	if x.sent.After(r.lastSent) {
		r.lastSent = x.sent
	}
	if success {
		r.ok++
	}
	if x.err != nil {
		msg := x.err.Error()
		if _, seen := r.errs[msg]; seen || len(r.errs) < maxErrorKinds {
			r.errs[msg]++
		} else {
			r.errs["(other errors)"]++
		}
		r.codes[0]++
	} else {
		r.codes[x.status]++
	}
	if r.steps != nil {
		i := 0
		for i < len(r.stepEnd)-1 && x.due >= r.stepEnd[i] {
			i++
		}
		s := &r.steps[i]
		stats.Record(s.hist, lat)
		s.requests++
		if success {
			s.ok++
		}
		if s.first.IsZero() || x.sent.Before(s.first) {
			s.first = x.sent
		}
		if x.sent.After(s.last) {
			s.last = x.sent
		}
	}
}

// takeSecond returns and resets the current second's completions.
func (r *recorder) takeSecond() (done, ok, failed uint64, s stats.Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done, ok, failed = r.secDone, r.secOK, r.secFailed
	s = stats.Summarize(r.second)
	r.second.Reset()
	r.secDone, r.secOK, r.secFailed = 0, 0, 0
	return done, ok, failed, s
}

func codeKey(c int) string { return strconv.Itoa(c) }
