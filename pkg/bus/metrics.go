package bus

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus series every stage reports.
type Metrics struct {
	messages *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the stage metrics on reg. Registering twice on the
// same registry returns the series already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "troy_stage_messages_total",
			Help: "Messages handled by a pipeline stage, by outcome (ok, retry, dead_letter).",
		}, []string{"stage", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "troy_stage_handle_seconds",
			Help:    "Time a pipeline stage spends on one message.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"stage"}),
	}
	m.messages = register(reg, m.messages)
	m.duration = register(reg, m.duration)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector.(C)
		}
	}
	return c
}
