package streamer

import "github.com/prometheus/client_golang/prometheus"

// metrics of the streamer, beside the stage metrics every service has.
type metrics struct {
	steps, findings, ended, takeovers, rebuilds, reordered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	c := func(name, help string) prometheus.Counter {
		ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: "troy_streamer_" + name, Help: help})
		if reg != nil {
			if err := reg.Register(ctr); err != nil {
				if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
					return are.ExistingCollector.(prometheus.Counter)
				}
			}
		}
		return ctr
	}
	return metrics{
		steps:     c("steps_total", "streamed steps taken"),
		findings:  c("findings_total", "findings reported while traces streamed"),
		ended:     c("traces_ended_total", "streamed traces ended and sent for their report"),
		takeovers: c("partition_takeovers_total", "times this process found another had read one of its partitions meanwhile"),
		rebuilds:  c("trace_rebuilds_total", "open traces rebuilt from the step log"),
		reordered: c("reordered_total", "step messages that landed before steps already decided (by timestamp)"),
	}
}
