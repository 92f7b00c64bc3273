package agentrun

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pkg/agent"
)

// Metrics counts agent runs for Prometheus, from their events.
type Metrics struct {
	runs      *prometheus.CounterVec
	llm       *prometheus.CounterVec
	toolCalls *prometheus.CounterVec
	blocked   *prometheus.CounterVec
	approvals *prometheus.CounterVec
	wait      prometheus.Histogram
	spend     prometheus.Counter
}

// NewMetrics registers the agent metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_agent_runs_total", Help: "Agent runs ended, by status."}, []string{"status"}),
		llm: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_agent_llm_calls_total", Help: "Model calls, by phase, status and model."},
			[]string{"phase", "status", "model"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_agent_tool_calls_total", Help: "Tool calls, by tool and outcome (ok or the error code)."},
			[]string{"tool", "outcome"}),
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_agent_blocked_calls_total", Help: "Tool calls the guardrails blocked, by tool."}, []string{"tool"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_agent_approvals_total", Help: "Approvals decided, by decision."},
			[]string{"decision"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troy_agent_approval_wait_seconds", Help: "Time calls waited for a person.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600}}),
		spend: prometheus.NewCounter(prometheus.CounterOpts{Name: "troy_agent_spend_usd_total", Help: "Model spend, USD."}),
	}
	for _, c := range []prometheus.Collector{m.runs, m.llm, m.toolCalls, m.blocked, m.approvals, m.wait, m.spend} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Emit implements agent.Sink.
func (m *Metrics) Emit(ev agent.Event) {
	d := ev.Data
	str := func(k string) string { s, _ := d[k].(string); return s }
	switch ev.Type {
	case agent.EventRunEnd:
		m.runs.WithLabelValues(str("status")).Inc()
	case agent.EventLLMResponse:
		m.llm.WithLabelValues(ev.Phase, str("status"), str("model")).Inc()
	case agent.EventToolResult:
		outcome := "ok"
		if ok, _ := d["ok"].(bool); !ok {
			outcome = str("error_code")
		}
		m.toolCalls.WithLabelValues(str("tool"), outcome).Inc()
	case agent.EventGuardrailBlocked:
		if _, isCall := d["disposition"]; isCall {
			m.blocked.WithLabelValues(str("tool")).Inc()
		}
	case agent.EventApprovalDecided:
		decision := "denied"
		if ok, _ := d["approved"].(bool); ok {
			decision = "approved"
		}
		m.approvals.WithLabelValues(decision).Inc()
		switch w := d["wait_ms"].(type) {
		case int64:
			m.wait.Observe(float64(w) / 1000)
		case float64:
			m.wait.Observe(w / 1000)
		}
	case agent.EventCostRecorded:
		if v, ok := d["call_usd"].(float64); ok && v > 0 {
			m.spend.Add(v)
		}
	}
}
