package explain_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/llm/llmtest"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

// BenchmarkLLMExplainer: 1,000 steps (50 traces x 20) through a stub that
// answers in 200 ms, at concurrency 16. The ideal is 1000 x 0.2 / 16 = 12.5 s
// (plus one summary per trace); it reports the wall time and the overhead
// per call beyond the stub's 200 ms.
func BenchmarkLLMExplainer(b *testing.B) {
	const latency, concurrency = 200 * time.Millisecond, 16
	srv := llmtest.New(b, func(_ int, r llmtest.Request) llmtest.Response {
		if r.ResponseFormat == nil {
			return llmtest.Response{Content: "summary", Delay: latency}
		}
		return llmtest.Response{Content: llmtest.StepJSON, Delay: latency}
	})
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "sk-bench", Concurrency: concurrency})
	if err != nil {
		b.Fatal(err)
	}
	x := &explain.LLM{Client: c}
	var traces []*trace.Trace
	for i := range 50 {
		raw, _ := json.Marshal(tracegen.Trace(3, i, 20))
		tr, err := trace.Parse(raw, trace.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		traces = append(traces, tr)
	}
	for b.Loop() {
		start := time.Now()
		var wg sync.WaitGroup
		for _, tr := range traces {
			wg.Go(func() {
				if _, err := x.Explain(context.Background(), tr, execgraph.Build(tr)); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		wall := time.Since(start)
		calls := 50*20 + 50
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(float64(calls)*latency.Seconds()/concurrency, "ideal-s")
		b.ReportMetric(float64((wall*concurrency/time.Duration(calls))-latency)/float64(time.Millisecond), "overhead-ms/call")
		b.ReportMetric(float64(srv.MaxInFlight()), "max-in-flight")
	}
}
