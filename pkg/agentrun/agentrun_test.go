package agentrun_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/llm"
)

// Two runs of one session cannot both go on: the second to save loses.
func TestSessionSavesAreConditional(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	a, err := agentrun.OpenSessions(ctx, srv.JS)
	require.NoError(t, err)
	b, err := agentrun.OpenSessions(ctx, srv.JS)
	require.NoError(t, err)
	st := &agent.State{SessionID: "s1", RunID: "r1", Status: agent.Running}
	require.NoError(t, a.Save(ctx, st))
	require.ErrorIs(t, b.Save(ctx, st), agent.ErrSessionConflict, "a second creator loses")

	s1, err := a.Load(ctx, "s1")
	require.NoError(t, err)
	s2, err := b.Load(ctx, "s1")
	require.NoError(t, err)
	require.NoError(t, a.Save(ctx, s1))
	assert.ErrorIs(t, b.Save(ctx, s2), agent.ErrSessionConflict)
	require.NoError(t, a.Save(ctx, s1), "the winner goes on")
}

// A request delivered again after its run ended (its ack was lost) is
// answered with the stored outcome, not run again.
func TestRedeliveredRequestIsAnsweredNotRerun(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	r, err := agentrun.New(context.Background(), srv.JS, 8, zerolog.Nop())
	require.NoError(t, err)
	calls := 0
	r.Providers.Register("instant", func(llm.ProviderConfig) (llm.Provider, error) {
		calls++
		return instant{}, nil
	})
	cfg := json.RawMessage(`{"name": "t", "llm": {"provider": "instant"}, "tools": ["scratchpad", "submit"], "budget": {"max_iterations": 1}, "audit": {"enabled": false}}`)
	req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: "g", Config: cfg, Workspace: t.TempDir()}
	out, err := r.Execute(context.Background(), req, nil, nil)
	require.NoError(t, err)
	require.Equal(t, agent.Exhausted, out.Status)
	again, err := r.Execute(context.Background(), req, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, out.Status, again.Status)
	assert.Equal(t, out.Answer, again.Answer)
	assert.Equal(t, 1, calls, "not run a second time")
	got, err := agentrun.WaitResult(context.Background(), srv.JS, req.RunID)
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, got.Status)
}

// costly answers like instant, at a cent a call.
type costly struct{ instant }

func (c costly) Complete(ctx context.Context, req llm.Request) (llm.Completion, error) {
	out, err := c.instant.Complete(ctx, req)
	out.CostUSD, out.Priced = 0.01, true
	return out, err
}

// A daily quota is shared by every run of an agent: the second run stops
// at what is left, the third does not start.
func TestDailyQuota(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	r, err := agentrun.New(context.Background(), srv.JS, 8, zerolog.Nop())
	require.NoError(t, err)
	r.Providers.Register("costly", func(llm.ProviderConfig) (llm.Provider, error) { return costly{}, nil })
	cfg := json.RawMessage(`{"name": "spender", "llm": {"provider": "costly"}, "tools": ["scratchpad", "submit"], "budget": {"max_iterations": 2},
		"cost": {"daily_usd": 0.08}, "audit": {"enabled": false}, "circuit_breaker": {"max_stalled_iterations": 10}}`)
	run := func() agentrun.Outcome {
		req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: "g", Config: cfg, Workspace: t.TempDir()}
		out, err := r.Execute(context.Background(), req, nil, nil)
		require.NoError(t, err)
		return out
	}
	first := run() // 2 iterations x 3 calls = $0.06
	assert.Equal(t, agent.Exhausted, first.Status)
	assert.InDelta(t, 0.06, first.CostUSD, 1e-9)
	second := run() // $0.02 left
	assert.Equal(t, agent.Exhausted, second.Status)
	assert.Contains(t, second.Answer, "cost_ceiling")
	assert.InDelta(t, 0.02, second.CostUSD, 1e-9)
	third := run()
	assert.Equal(t, agent.Exhausted, third.Status)
	assert.Contains(t, third.Answer, "daily quota of $0.08 for agent spender is spent")
	assert.Zero(t, third.Iterations)
}

// A runner with a workspace root refuses a queued run's workspace outside it.
func TestWorkspaceRoot(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	r, err := agentrun.New(context.Background(), srv.JS, 8, zerolog.Nop())
	require.NoError(t, err)
	r.Providers.Register("instant", func(llm.ProviderConfig) (llm.Provider, error) { return instant{}, nil })
	r.WorkspaceRoot = t.TempDir()
	cfg := json.RawMessage(`{"name": "t", "llm": {"provider": "instant"}, "tools": ["scratchpad", "submit"], "budget": {"max_iterations": 1}, "audit": {"enabled": false}}`)
	req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: "g", Config: cfg, Workspace: t.TempDir()}
	_, err = r.Execute(context.Background(), req, nil, nil)
	require.ErrorIs(t, err, agentrun.ErrBadRequest)
	assert.Contains(t, err.Error(), "outside")
	inside := filepath.Join(r.WorkspaceRoot, "ws")
	require.NoError(t, os.MkdirAll(inside, 0o755))
	req.Workspace, req.RunID, req.SessionID = inside, agent.NewID(), agent.NewID()
	out, err := r.Execute(context.Background(), req, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, out.Status)
}
