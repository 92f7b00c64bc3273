package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

// Scenario 24: telemetry from a full run, and from synthetic events.
func TestTelemetry(t *testing.T) {
	m := &llm.Scripted{ModelName: "gpt-4o-mini", Pricing: &llm.Pricing{Prices: llm.DefaultPrices},
		Responses: []llm.ScriptedResponse{P("s1", "file_system"), A("file_system", write("f.txt", "hi")),
			E("success", "wrote 2 characters", "complete", "s1"), P("s2", "submit"), S("complete")}}
	reg, _ := tools.NewRegistry(tools.FileSystem{}, tools.Submit{})
	tel := &agent.Telemetry{}
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: t.TempDir(), Sink: tel})
	require.NoError(t, err)
	_, err = a.Run(context.Background(), "write hi", nil)
	require.NoError(t, err)
	assert.Equal(t, 5, tel.LLM.Count)
	assert.Equal(t, map[string]int{"analyze": 2, "act": 2, "observe": 1}, tel.LLMPhase)
	assert.Equal(t, map[string]int{"ok": 5}, tel.LLM.StatusCodes)
	assert.Equal(t, 1, tel.Tools["file_system"].Count)
	assert.Equal(t, 1, tel.Tools["submit"].Count)
	o := tel.Overview()
	assert.Equal(t, 2, o["tool_calls"])
	assert.Greater(t, o["total_cost_usd"], 0.0)
	assert.InDelta(t, 0, o["idle_wait_s"], 0.001)
	assert.Equal(t, 1.0, o["llm_success_rate"])

	now := time.Now()
	tel = &agent.Telemetry{}
	tel.Emit(agent.Event{Type: agent.EventApprovalRequested, RunID: "r", TS: now, Data: map[string]any{"tool": "x"}})
	tel.Emit(agent.Event{Type: agent.EventApprovalDecided, RunID: "r", TS: now.Add(30 * time.Second), Data: map[string]any{"tool": "x"}})
	tel.Emit(agent.Event{Type: agent.EventApprovalDecided, RunID: "r", TS: now.Add(40 * time.Second), Data: map[string]any{"tool": "y"}}) // unmatched
	tel.Emit(agent.Event{Type: agent.EventLLMResponse, RunID: "r", Phase: "act", Data: map[string]any{"status": "error", "status_code": 529}})
	tel.Emit(agent.Event{Type: agent.EventCostRecorded, Data: map[string]any{"run_usd": 0.5}})
	tel.Emit(agent.Event{Type: agent.EventCostRecorded, Data: map[string]any{"run_usd": 0.7}})
	tel.Emit(agent.Event{Type: agent.EventGuardrailBlocked, Data: map[string]any{"tool": "file_system", "disposition": "block"}})
	tel.Emit(agent.Event{Type: agent.EventCostCircuitOpen, Data: map[string]any{"reason": "stalled"}})
	assert.InDelta(t, 30, tel.IdleS, 0.001)
	assert.Equal(t, 1, tel.LLM.StatusCodes["http_529"])
	assert.Equal(t, 0.7, tel.CostUSD, "the running total, not a sum")
	assert.Equal(t, map[string]int{"file_system": 1}, tel.BlockedByTool)
	assert.Equal(t, 1, tel.Overview()["circuit_trips"])
}
