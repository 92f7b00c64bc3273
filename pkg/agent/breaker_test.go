package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

func withUsage(r llm.ScriptedResponse, in, out int) llm.ScriptedResponse {
	r.Usage = llm.Usage{InputTokens: in, OutputTokens: out}
	return r
}

func breakerAgent(t *testing.T, m *llm.Scripted, b agent.Breaker) (*agent.Agent, *agent.Recorder, string) {
	t.Helper()
	reg, err := tools.NewRegistry(tools.FileSystem{}, tools.Submit{})
	require.NoError(t, err)
	rec := &agent.Recorder{}
	ws := t.TempDir()
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: ws, Sink: rec, Breaker: b})
	require.NoError(t, err)
	return a, rec, ws
}

// Scenario 9: the dollar ceiling trips after the first OBSERVE, with a
// warning once at 75% on the way.
func TestCostCeiling(t *testing.T) {
	m := &llm.Scripted{ModelName: "claude-sonnet-4-6", Pricing: &llm.Pricing{Prices: map[string]llm.Price{"claude-sonnet-4-6": {Input: 3, Output: 15}}},
		Responses: []llm.ScriptedResponse{withUsage(P("s1", "file_system"), 1000, 200), withUsage(A("file_system", write("f.txt", "x")), 1000, 50),
			withUsage(E("success", "wrote the file as asked", "in_progress"), 800, 150), P("s2", "submit"), S("complete")}}
	a, rec, _ := breakerAgent(t, m, agent.Breaker{MaxUSD: 0.01})
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, res.Status)
	assert.Contains(t, res.Answer, "circuit breaker")
	assert.Contains(t, res.Answer, "cost_ceiling")
	assert.GreaterOrEqual(t, res.CostUSD, 0.01)
	assert.Len(t, m.Calls(), 3, "stopped after the first OBSERVE")
	assert.Len(t, rec.Of(agent.EventCostWarning), 1)
	open := rec.Of(agent.EventCostCircuitOpen)
	require.Len(t, open, 1)
	assert.Equal(t, "cost_ceiling", open[0].Data["reason"])
}

// Scenario 10: the second identical call never runs; submit is exempt.
func TestIdenticalCallsTripTheBreaker(t *testing.T) {
	same := A("file_system", write("f.txt", "x"))
	m := &llm.Scripted{Responses: []llm.ScriptedResponse{P("s1", "file_system"), same, E("partial", "wrote the file once more", "in_progress"),
		P("s1", "file_system"), same}}
	a, rec, _ := breakerAgent(t, m, agent.Breaker{MaxIdenticalToolCalls: 2})
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Blocked, res.Status)
	assert.Len(t, rec.Of(agent.EventToolResult), 1, "the second identical call did not run")
	assert.Equal(t, "repeated_tool_call", rec.Of(agent.EventCostCircuitOpen)[0].Data["reason"])

	m = &llm.Scripted{Responses: []llm.ScriptedResponse{P("s2", "submit"), S("complete")}}
	a, _, _ = breakerAgent(t, m, agent.Breaker{MaxIdenticalToolCalls: 1})
	res, err = a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res.Status, "submit is exempt")
}

// Scenario 11: repeating a step without completing anything new stalls;
// completing a step resets the count, and so does moving to another step.
func TestStallDetector(t *testing.T) {
	var script []llm.ScriptedResponse
	for i := range 4 {
		script = append(script, P("s1", "file_system"), A("file_system", write(fmt.Sprintf("f%d", i), "x")), E("partial", "wrote one file more", "in_progress"))
	}
	a, rec, _ := breakerAgent(t, &llm.Scripted{Responses: script}, agent.Breaker{MaxStalledIterations: 2})
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Blocked, res.Status)
	assert.Equal(t, 3, res.Iterations, "stalled at iteration 3")
	assert.Equal(t, "stalled", rec.Of(agent.EventCostCircuitOpen)[0].Data["reason"])

	script = script[:0]
	steps := []string{"s1", "s2", "s1", "s2"}
	for i, s := range steps {
		script = append(script, P(s, "file_system"), A("file_system", write(fmt.Sprintf("f%d", i), "x")), E("partial", "wrote one file more", "in_progress"))
	}
	script = append(script, P("s2", "submit"), S("complete"))
	a, _, _ = breakerAgent(t, &llm.Scripted{Responses: script}, agent.Breaker{MaxStalledIterations: 2})
	res, err = a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res.Status, "alternating steps is not a stall")
}

// Scenario 12: an unpriced model costs $0 and says so once.
func TestUnpricedModelWarnsOnce(t *testing.T) {
	m := &llm.Scripted{ModelName: "mystery-model", Pricing: &llm.Pricing{Prices: llm.DefaultPrices},
		Responses: []llm.ScriptedResponse{P("s1", "file_system"), A("file_system", write("f.txt", "x")), E("success", "wrote the file as asked", "in_progress"),
			P("s2", "submit"), S("complete")}}
	a, rec, ws := breakerAgent(t, m, agent.Breaker{MaxUSD: 1})
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res.Status)
	assert.Zero(t, res.CostUSD)
	warns := rec.Of(agent.EventCostWarning)
	require.Len(t, warns, 1)
	assert.True(t, strings.HasPrefix(warns[0].Data["message"].(string), "No rate card for 'mystery-model'"))
	for _, c := range rec.Of(agent.EventCostRecorded) {
		assert.Equal(t, false, c.Data["priced"])
	}
	assert.FileExists(t, filepath.Join(ws, "f.txt"))
}

// The breaker's state belongs to its run: a resumed session's new run
// counts afresh, spend carries on.
func TestBreakerStateIsPerRun(t *testing.T) {
	same := A("file_system", write("f.txt", "x"))
	ctl := &agent.Control{}
	m := &llm.Scripted{Responses: []llm.ScriptedResponse{P("s1", "file_system"), same}}
	m.OnCall = func(i int, _ llm.Request) {
		if i == 1 {
			ctl.Cancel("pause")
		}
	}
	store := agent.NewMemoryStore()
	reg, _ := tools.NewRegistry(tools.FileSystem{}, tools.Submit{})
	ws := t.TempDir()
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: ws, Store: store, Breaker: agent.Breaker{MaxIdenticalToolCalls: 2}})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "g", ctl)
	require.NoError(t, err)
	require.Equal(t, agent.Cancelled, res.Status)
	m2 := &llm.Scripted{Responses: []llm.ScriptedResponse{P("s1", "file_system"), same, E("success", "wrote the file again", "in_progress"), P("s2", "submit"), S("complete")}}
	a, err = agent.New(agent.Config{Model: m2, Tools: reg, Workspace: ws, Store: store, Breaker: agent.Breaker{MaxIdenticalToolCalls: 2}})
	require.NoError(t, err)
	res, err = a.Resume(context.Background(), res.SessionID, nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res.Status, "the new run's first identical call is its first")
}
