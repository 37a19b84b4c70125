package registry

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// memoryBackend opens memory channels that share one byte budget (WithMemoryLimit; its
// flag, --memory-limit, belongs to sluice serve, which also bounds the Go heap by it). It
// is always configured.
type memoryBackend struct {
	budget  *memory.Budget
	reg     prometheus.Registerer
	metrics prometheus.Collector
	share   int64 // bytes one namespace may hold (WithNamespaceShare); the limit: no shares

	mu     sync.Mutex
	shares map[string]*memory.Budget // by namespace, when share < the limit
}

func (m *memoryBackend) flags(*pflag.FlagSet) {}

func (m *memoryBackend) needs() string { return "nothing" }

func (m *memoryBackend) check(s config.Settings) error { return onlyKeys(s) }

func (m *memoryBackend) start(_ context.Context, e env) (bool, error) {
	m.budget = memory.NewBudget(e.memoryLimit)
	m.share = int64(float64(e.memoryLimit) * e.nsShare)
	if e.reg != nil {
		m.reg, m.metrics = e.reg, budgetCollector{m.budget}
		if err := e.reg.Register(m.metrics); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (m *memoryBackend) open(_ context.Context, b config.Broker) (channel.Channel, error) {
	if m.share >= m.budget.Limit() {
		return memory.New(memory.WithBudget(m.budget)), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shares[b.Namespace]
	if s == nil {
		if m.shares == nil {
			m.shares = map[string]*memory.Budget{}
		}
		s = m.budget.Share(m.share)
		m.shares[b.Namespace] = s
	}
	return memory.New(memory.WithBudget(s)), nil
}

func (m *memoryBackend) close(context.Context) error {
	if m.reg != nil {
		m.reg.Unregister(m.metrics)
	}
	return nil
}

var (
	queueBytes = prometheus.NewDesc("sluice_queue_bytes", "Bytes of events held by memory channels.", nil, nil)
	queueLimit = prometheus.NewDesc("sluice_queue_bytes_limit", "The memory channels' byte budget (--memory-limit).", nil, nil)
)

// budgetCollector reports the memory channels' budget at scrape time.
type budgetCollector struct{ b *memory.Budget }

func (c budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueBytes; ch <- queueLimit }

func (c budgetCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(queueBytes, prometheus.GaugeValue, float64(c.b.Used()))
	ch <- prometheus.MustNewConstMetric(queueLimit, prometheus.GaugeValue, float64(c.b.Limit()))
}

func (m *memoryBackend) given() bool { return true }
