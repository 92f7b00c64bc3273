package agentrun_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/llm"
)

// instant answers every phase at once: plan a scratchpad write, make it,
// judge it partial, until the iteration budget ends the run.
type instant struct{}

func (instant) Model() string { return "instant" }

func (instant) Complete(_ context.Context, req llm.Request) (llm.Completion, error) {
	u := llm.Usage{InputTokens: 1, OutputTokens: 1}
	switch req.Phase {
	case agent.PhaseAnalyze:
		return llm.Completion{Usage: u, Text: `<plan>{"goal_restatement": "g", "steps": [{"id": "s1", "description": "note"}],
 "next_action": {"step_id": "s1", "tool": "scratchpad", "rationale": "keep a note", "success_criteria": "stored"}}</plan>`}, nil
	case agent.PhaseAct:
		return llm.Completion{Usage: u, ToolCalls: []llm.ToolCall{{ID: "c", Name: "scratchpad", Arguments: json.RawMessage(`{"action":"write","key":"k","value":1}`)}}}, nil
	}
	return llm.Completion{Usage: u, Text: `<evaluation>{"outcome": "partial", "evidence": "Stored k in the pad", "completed_step_ids": [], "goal_status": "in_progress", "next_step": "again"}</evaluation>`}, nil
}

// BenchmarkIterationOnBus is one iteration as troy agent runs it: session
// checkpoints in the KV bucket after every phase, every event published,
// every step streamed to the audit log (no tool work to speak of).
func BenchmarkIterationOnBus(b *testing.B) {
	srv, _ := bustest.Provisioned(b)
	r, err := agentrun.New(context.Background(), srv.JS, 8, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	r.Providers.Register("instant", func(llm.ProviderConfig) (llm.Provider, error) { return instant{}, nil })
	cfg := json.RawMessage(`{"name": "bench", "llm": {"provider": "instant"}, "tools": ["scratchpad", "submit"], "budget": {"max_iterations": 20},
		"circuit_breaker": {"max_identical_tool_calls": 1000, "max_stalled_iterations": 1000}}`)
	ws := b.TempDir()
	iters := 0
	b.ReportAllocs()
	for b.Loop() {
		req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: "bench", Config: cfg, Workspace: ws}
		out, err := r.Execute(context.Background(), req, nil, nil)
		if err != nil || out.Status != agent.Exhausted || len(out.Problems) > 0 {
			b.Fatalf("%v %v %v", out.Status, err, out.Problems)
		}
		iters += out.Iterations
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(iters), "µs/iteration")
}
