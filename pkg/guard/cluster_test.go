package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/services/guardserver"
)

// TestASessionSurvivesLosingANode: a guard session on a 3-node cluster
// keeps its history when the node leading the cluster goes, and the check
// after it is judged on the action allowed before.
func TestASessionSurvivesLosingANode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: waits for a leader election")
	}
	c, js, deps := bustest.ProvisionedCluster(t)
	nc := js.Conn()
	ctx := context.Background()
	store, err := policystore.Open(ctx, js)
	require.NoError(t, err)
	_, err = store.Push(ctx, engine(t, policyYAML).Policy())
	require.NoError(t, err)
	svc, err := guardserver.New(ctx, nc, deps, prometheus.NewRegistry(), guardserver.Config{DefaultPolicy: "guard-test"})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	defer func() { cancel(); <-done }()

	client := &guard.NATS{Conn: nc}
	check := func(a guard.Action) guard.Decision {
		t.Helper()
		var d guard.Decision
		require.Eventually(t, func() bool {
			d, err = client.Check(ctx, guard.Request{SessionID: "ha-1", Action: a})
			return err == nil && d.Reason == "" // a guard answered, not a closed failure
		}, 60*time.Second, 100*time.Millisecond, "the guard answers: %+v %v", d, err)
		return d
	}
	assert.Equal(t, guard.Allow, check(readPII).Decision)
	for _, s := range c.Servers {
		if s.JetStreamIsLeader() {
			name := s.Name()
			s.Shutdown()
			t.Logf("shut down %s", name)
			defer c.Restart(name)
			break
		}
	}
	d := check(postOut)
	assert.Equal(t, guard.Block, d.Decision, "judged on the session's history from before the node went")
	require.NotEmpty(t, d.Violations)
	assert.Equal(t, "no-external-after-pii", d.Violations[0].RuleID)
}
