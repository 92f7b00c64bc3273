package policy

import (
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

func benchEngine(b *testing.B) *Engine {
	b.Helper()
	p, err := Load("testdata/bench_policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	e, err := Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func benchTraces(b *testing.B, n, steps int) []*trace.Trace {
	b.Helper()
	out := make([]*trace.Trace, n)
	for i := range n {
		raw, _ := json.Marshal(tracegen.Trace(7, i, steps))
		t, err := trace.Parse(raw, trace.DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		out[i] = t
	}
	return out
}

// BenchmarkEvaluate reports step-evaluations/s of the 8-rule bench policy
// over generated 20-step traces (make bench prints it beside the Python
// reference on the same traces).
func BenchmarkEvaluate(b *testing.B) {
	e := benchEngine(b)
	traces := benchTraces(b, 200, 20)
	b.ReportAllocs()
	b.ResetTimer()
	steps := 0
	for i := 0; b.Loop(); i++ {
		t := traces[i%len(traces)]
		e.Evaluate(t)
		steps += len(t.Steps)
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkEvaluateParallel is the same work on every core, as the evaluator
// service runs it (one engine shared by its workers).
func BenchmarkEvaluateParallel(b *testing.B) {
	e := benchEngine(b)
	traces := benchTraces(b, 200, 20)
	b.ReportAllocs()
	b.ResetTimer()
	var steps atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i, n := 0, 0
		for pb.Next() {
			t := traces[i%len(traces)]
			e.Evaluate(t)
			n += len(t.Steps)
			i++
		}
		steps.Add(int64(n))
	})
	b.ReportMetric(float64(steps.Load())/b.Elapsed().Seconds(), "steps/s")
}
