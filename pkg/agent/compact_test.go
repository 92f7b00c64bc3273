package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

// phased answers by phase: each iteration writes a long note to the
// scratchpad, then the run submits at iteration `until`.
type phased struct {
	mu    sync.Mutex
	iter  int
	until int
	calls []llm.Request
}

func (m *phased) Model() string { return "phased" }

func (m *phased) Complete(_ context.Context, req llm.Request) (llm.Completion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, req)
	u := llm.Usage{InputTokens: 10, OutputTokens: 10}
	switch req.Phase {
	case agent.PhaseCompaction:
		return llm.Completion{Text: fmt.Sprintf("SUMMARY after %d calls", len(m.calls)), Usage: u}, nil
	case agent.PhaseAnalyze:
		m.iter++
		tool := "scratchpad"
		if m.iter >= m.until {
			tool = "submit"
		}
		return llm.Completion{Text: P("s1", tool).Text, Usage: u}, nil
	case agent.PhaseAct:
		if m.iter >= m.until {
			return llm.Completion{ToolCalls: []llm.ToolCall{{ID: "done", Name: "submit", Arguments: json.RawMessage(`{"answer":"ok","status":"complete","confidence":1}`)}}, Usage: u}, nil
		}
		args, _ := json.Marshal(map[string]any{"action": "write", "key": fmt.Sprintf("k%d", m.iter), "value": strings.Repeat("x", 1500)})
		return llm.Completion{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("c%d", m.iter), Name: "scratchpad", Arguments: args}}, Usage: u}, nil
	}
	return llm.Completion{Text: E("partial", "stored another long note", "in_progress").Text, Usage: u}, nil
}

func TestCompactionKeepsRecentIterationsAndPairs(t *testing.T) {
	m := &phased{until: 10}
	reg, err := tools.NewRegistry(tools.Scratchpad{}, tools.Submit{})
	require.NoError(t, err)
	rec := &agent.Recorder{}
	store := agent.NewMemoryStore()
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: t.TempDir(), Sink: rec, Store: store,
		Compaction: agent.Compaction{ContextWindowTokens: 4000, TriggerRatio: 0.7, KeepIterations: 3},
		Breaker:    agent.Breaker{MaxStalledIterations: 100}}) // it takes notes on one step on purpose
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "take notes", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, res.Status, res.Answer)

	comps := rec.Of(agent.EventMemoryCompaction)
	require.NotEmpty(t, comps, "a 4,000-token window overflows within ten iterations")
	for _, c := range comps {
		assert.Less(t, c.Data["after_tokens"], c.Data["before_tokens"])
	}
	var sawSummary bool
	for _, c := range m.calls {
		if c.Phase == agent.PhaseCompaction {
			continue
		}
		assertWellFormed(t, c.Turns)
		if len(c.Turns) > 0 {
			assert.Equal(t, "user", c.Turns[0].Role, "the kept conversation starts with a user turn")
		}
		if strings.Contains(c.System, "# Summary of earlier iterations\nSUMMARY after") {
			sawSummary = true
		}
	}
	assert.True(t, sawSummary, "the summary rides in the system prompt")
	st, err := store.Load(context.Background(), res.SessionID)
	require.NoError(t, err)
	assert.Positive(t, st.SummarizedThrough)
	assert.Positive(t, st.UsageByPhase[agent.PhaseCompaction].Total(), "the fold is metered")
	for i := 1; i < 10; i++ {
		assert.Contains(t, st.Scratchpad, fmt.Sprintf("k%d", i), "the scratchpad is never compacted")
	}
	for _, tu := range st.Transcript {
		assert.GreaterOrEqual(t, tu.Iteration, st.Iteration-3-1, "only recent iterations stay verbatim")
	}
}

func TestContextWindowByModel(t *testing.T) {
	assert.Equal(t, 128_000, agent.ContextWindow("gpt-4o-mini-2024-07-18"))
	assert.Equal(t, 1_047_576, agent.ContextWindow("gpt-4.1-mini"))
	assert.Equal(t, 128_000, agent.ContextWindow("mystery-model"))
}

// A fold larger than a chunk is summarised chunk by chunk, then merged.
func TestCompactionRecursesOverChunks(t *testing.T) {
	m := &phased{until: 8}
	reg, _ := tools.NewRegistry(tools.Scratchpad{}, tools.Submit{})
	rec := &agent.Recorder{}
	a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: t.TempDir(), Sink: rec,
		Compaction: agent.Compaction{ContextWindowTokens: 4000, KeepIterations: 2, ChunkTokens: 400},
		Breaker:    agent.Breaker{MaxStalledIterations: 100}})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "take notes", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, res.Status)
	folds := len(rec.Of(agent.EventMemoryCompaction))
	require.Positive(t, folds)
	var summaries int
	for _, c := range m.calls {
		if c.Phase == agent.PhaseCompaction {
			summaries++
			assert.LessOrEqual(t, len(c.Turns[0].Text), 400*4+600, "no summarising call is over a chunk")
		}
	}
	assert.Greater(t, summaries, folds, "chunks, then a merge")
}
