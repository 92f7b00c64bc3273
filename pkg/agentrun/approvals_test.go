package agentrun_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent/guardrails"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

func TestApprovalsOverTheBus(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	asker, err := agentrun.OpenApprovals(ctx, srv.JS)
	require.NoError(t, err)
	decider, err := agentrun.OpenApprovals(ctx, srv.JS)
	require.NoError(t, err)

	ask := func(a *agentrun.Approvals, id string) chan guardrails.Answer {
		ch := make(chan guardrails.Answer, 1)
		go func() {
			ans, err := a.Approve(ctx, guardrails.ApprovalRequest{ID: id, Tool: "file_system", Tier: guardrails.Danger, RunID: "run1"})
			assert.NoError(t, err)
			ch <- ans
		}()
		require.Eventually(t, func() bool {
			items, _ := decider.List(ctx, false)
			for _, it := range items {
				if it.ID == id {
					return true
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "the request is listed while it waits")
		return ch
	}

	ch := ask(asker, "ap1")
	rec, err := decider.Decide(ctx, "ap1", true, "ann", "looks fine")
	require.NoError(t, err)
	assert.Equal(t, agentrun.Approved, rec.Status)
	ans := <-ch
	assert.Equal(t, guardrails.Answer{Approved: true, By: "ann", Reason: "looks fine"}, ans)
	_, err = decider.Decide(ctx, "ap1", false, "bob", "too late")
	var done *agentrun.AlreadyDecided
	require.ErrorAs(t, err, &done)
	assert.Equal(t, "ann", done.Approval.By)

	ch = ask(asker, "ap2")
	_, err = decider.Decide(ctx, "ap2", false, "bob", "not on prod")
	require.NoError(t, err)
	assert.Equal(t, guardrails.Answer{By: "bob", Reason: "not on prod"}, <-ch)

	ch = ask(asker.WithTimeout(300*time.Millisecond), "ap3")
	ans = <-ch
	assert.False(t, ans.Approved, "nobody deciding denies")
	assert.Equal(t, "timeout", ans.By)
	items, err := decider.List(ctx, true)
	require.NoError(t, err)
	assert.Len(t, items, 3)

	_, err = decider.Decide(ctx, "nope", true, "x", "")
	assert.True(t, errors.Is(err, agentrun.ErrNoApproval))
}
