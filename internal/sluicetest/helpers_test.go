package sluicetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fatalTB records a Fatalf and stops the calling goroutine's helper by panicking, so a
// test can check that a helper fails the test it is given.
type fatalTB struct {
	testing.TB
	msg string
}

type fatal struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(fatal{})
}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

// failure runs fn with a fatalTB and returns the message it failed with ("" if none).
func failure(fn func(tb testing.TB)) (msg string) {
	f := &fatalTB{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	return ""
}

func TestEventually(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holdsAt int // the call from which cond holds; 0: never
		want    string
	}{
		{name: "holds at once", holdsAt: 1},
		{name: "holds later", holdsAt: 5},
		{name: "never", want: "timed out after 50ms waiting for the thing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			got := failure(func(tb testing.TB) {
				Eventually(tb, 50*time.Millisecond, "the thing", func() bool {
					calls++
					return tc.holdsAt > 0 && calls >= tc.holdsAt
				})
			})
			if got != tc.want {
				t.Errorf("failed with %q, want %q", got, tc.want)
			}
			if tc.holdsAt > 0 && calls != tc.holdsAt {
				t.Errorf("cond called %d times, want %d (no call after it holds)", calls, tc.holdsAt)
			}
			if took := time.Since(start); tc.holdsAt == 0 && took < 50*time.Millisecond {
				t.Errorf("gave up after %v, before the 50ms it was given", took)
			}
		})
	}
}

// brokenCollector is an unchecked collector whose one metric is invalid, so that
// Registry.Gather fails.
type brokenCollector struct{}

func (brokenCollector) Describe(chan<- *prometheus.Desc) {}
func (brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("broken", "h", nil, nil), errors.New("broken on purpose"))
}

func TestGather(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "h"}, []string{"a", "b"})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c", Help: "h"})
	reg.MustRegister(g, c)
	g.WithLabelValues("x", "y").Set(3)
	g.WithLabelValues("z", `q"`).Set(-1)
	c.Add(7)
	for _, tc := range []struct {
		name string
		want map[string]float64
	}{
		{"g", map[string]float64{`a="x",b="y"`: 3, `a="z",b="q\""`: -1}},
		{"c", map[string]float64{"": 7}},
		{"absent", map[string]float64{}},
	} {
		if got := Gather(t, reg, tc.name); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Gather(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	bad := prometheus.NewRegistry()
	bad.MustRegister(brokenCollector{})
	if got := failure(func(tb testing.TB) { Gather(tb, bad, "g") }); !strings.Contains(got, "broken on purpose") {
		t.Errorf("Gather of a registry whose Gather fails: failed with %q, want the registry's error", got)
	}
}
