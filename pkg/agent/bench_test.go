package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

// instant answers each phase at once, forever: ANALYZE plans a no-op
// call, ACT makes it, OBSERVE judges it a partial success, until the
// iteration budget ends the run.
type instant struct{ plan, eval string }

func (m *instant) Model() string { return "instant" }

func (m *instant) Complete(_ context.Context, req llm.Request) (llm.Completion, error) {
	u := llm.Usage{InputTokens: 1, OutputTokens: 1}
	switch req.Phase {
	case agent.PhaseAnalyze:
		return llm.Completion{Text: m.plan, Usage: u}, nil
	case agent.PhaseAct:
		return llm.Completion{ToolCalls: []llm.ToolCall{{ID: "c", Name: "noop", Arguments: json.RawMessage(`{"n":1}`)}}, Usage: u}, nil
	}
	return llm.Completion{Text: m.eval, Usage: u}, nil
}

type noop struct{}

func (noop) Spec() tools.Spec {
	return tools.Spec{Name: "noop", Safety: tools.ReadOnly, InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`)}
}
func (noop) Run(context.Context, *tools.Env, json.RawMessage) (tools.Output, *tools.Error) {
	return tools.Output{Content: "ok"}, nil
}

// BenchmarkIteration is the loop's own cost per iteration (three model
// calls answered instantly, one no-op tool call, contracts, checkpoints in
// the memory store, events to a recorder), the tool's work excluded.
func BenchmarkIteration(b *testing.B) {
	const perRun = 20
	reg, err := tools.NewRegistry(noop{}, tools.Submit{})
	if err != nil {
		b.Fatal(err)
	}
	m := &instant{plan: P("s1", "noop").Text, eval: E("partial", "the no-op call answered ok", "in_progress").Text}
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: b.TempDir(), Sink: agent.SinkFunc(func(agent.Event) {}),
		Budget:  agent.Budget{MaxIterations: perRun},
		Breaker: agent.Breaker{MaxIdenticalToolCalls: 1000, MaxStalledIterations: 1000}}) // it repeats itself on purpose
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	iters := 0
	for b.Loop() {
		res, err := a.Run(context.Background(), "bench", nil)
		if err != nil || res.Status != agent.Exhausted {
			b.Fatalf("%v %v", res.Status, err)
		}
		iters += res.Iterations
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(iters), "µs/iteration")
}

// BenchmarkRegistryInvoke is the registry's overhead on one call: schema
// validation, the timeout, the goroutine and panic guard.
func BenchmarkRegistryInvoke(b *testing.B) {
	reg, err := tools.NewRegistry(noop{})
	if err != nil {
		b.Fatal(err)
	}
	env := &tools.Env{}
	call := tools.Call{ID: "c", Name: "noop", Arguments: json.RawMessage(`{"n":1}`)}
	b.ReportAllocs()
	for b.Loop() {
		if r := reg.Invoke(context.Background(), env, call); !r.OK {
			b.Fatal(r.ModelText())
		}
	}
}
