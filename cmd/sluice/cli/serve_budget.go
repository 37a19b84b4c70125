package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/internal/httpserver"
)

// registerBodyBudget exports the ingress server's in-flight body budget
// (--max-inflight-body-bytes) as metrics on reg.
func registerBodyBudget(reg prometheus.Registerer, hs *httpserver.Server) error {
	gauge := func(name, help string, v func(httpserver.BodyBudgetStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v(hs.BodyBudget())) })
	}
	counter := func(name, help string, v func(httpserver.BodyBudgetStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(hs.BodyBudget())) })
	}
	for _, c := range []prometheus.Collector{
		gauge("sluice_inflight_body_limit_bytes", "The in-flight body budget (--max-inflight-body-bytes).",
			func(s httpserver.BodyBudgetStats) int64 { return s.Limit }),
		gauge("sluice_inflight_body_bytes", "Bytes the bodies of the requests in progress hold now.",
			func(s httpserver.BodyBudgetStats) int64 { return s.Used }),
		gauge("sluice_inflight_body_peak_bytes", "The most bytes request bodies held at once since start.",
			func(s httpserver.BodyBudgetStats) int64 { return s.Peak }),
		gauge("sluice_inflight_body_waiting_requests", "Requests waiting for room in the body budget now.",
			func(s httpserver.BodyBudgetStats) int64 { return s.Waiting }),
		counter("sluice_inflight_body_waits_total", "Requests that waited for room in the body budget.",
			func(s httpserver.BodyBudgetStats) int64 { return s.Waited }),
		counter("sluice_inflight_body_refused_total", "Requests refused 503 for want of room in the body budget.",
			func(s httpserver.BodyBudgetStats) int64 { return s.Refused }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
