package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/services/guardserver"
)

type failingRecorder struct{}

func (failingRecorder) Record(guard.Request, guard.Decision) error {
	return errors.New("ledger unreachable")
}

func TestADecisionThatCannotBeRecordedBlocks(t *testing.T) {
	g := &guard.Local{Policies: guard.Static{E: engine(t, policyYAML)}, Recorder: failingRecorder{}}
	d, err := g.Check(context.Background(), guard.Request{Action: listDocs})
	require.Error(t, err)
	assert.Equal(t, guard.Block, d.Decision, "an allow that left no record is not given")
	assert.Contains(t, d.Reason, "could not be recorded: ledger unreachable")
}

// The guard service records every decision it gives, over NATS, in its
// own ledger: what was asked (the input only as a hash), under which
// policy version, and the rules behind a block.
func TestGuardServiceRecordsEveryDecision(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	ctx := context.Background()
	store, err := policystore.Open(ctx, srv.JS)
	require.NoError(t, err)
	_, err = store.Push(ctx, engine(t, policyYAML).Policy())
	require.NoError(t, err)
	id := ledger.InstanceID("guard")
	svc, err := guardserver.New(ctx, srv.NC, deps, prometheus.NewRegistry(), guardserver.Config{DefaultPolicy: "guard-test", Ledger: id})
	require.NoError(t, err)
	assert.Equal(t, id, svc.Ledger())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()

	nats := &guard.NATS{Conn: srv.NC}
	var d guard.Decision
	require.Eventually(t, func() bool {
		d, err = nats.Check(ctx, guard.Request{SessionID: "s1", Action: readPII})
		return err == nil && d.Reason == ""
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, guard.Allow, d.Decision, d.Reason)
	d, err = nats.Check(ctx, guard.Request{SessionID: "s1", Action: rmRF})
	require.NoError(t, err)
	require.Equal(t, guard.Block, d.Decision)
	cancel() // stopping writes what is queued
	require.NoError(t, <-done)

	entries, err := ledger.Read(ctx, srv.JS, id)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	_, err = ledger.Verify(id, entries)
	require.NoError(t, err)
	blocked, err := ledger.Decode(entries[1])
	require.NoError(t, err)
	assert.Equal(t, "guard", blocked.Kind)
	assert.Equal(t, "block", blocked.Data["decision"])
	assert.Equal(t, d.PolicyHash, blocked.Data["policy_hash"])
	assert.Equal(t, "s1", blocked.Data["session_id"])
	assert.Equal(t, []any{map[string]any{"rule_id": "no-rm-rf", "severity": "high"}}, blocked.Data["violations"])
	action := blocked.Data["action"].(map[string]any)
	assert.Equal(t, "bash", action["name"])
	assert.Equal(t, ledger.Digest(rmRF.Input), action["input_sha256"])
	assert.NotContains(t, string(entries[1]), "rm -rf", "the input itself is not stored")
}

// A requester may name any reply subject; the guard answers only inboxes,
// so a check cannot have its answer published onto a stream (here: the
// findings SIEMs read).
func TestTheGuardAnswersOnlyInboxes(t *testing.T) {
	srv, _ := startGuard(t)
	findings, err := srv.NC.SubscribeSync("troy.violations.>")
	require.NoError(t, err)
	req, _ := json.Marshal(guard.Request{Action: listDocs})
	require.NoError(t, srv.NC.PublishRequest(guard.Subject, "troy.violations.critical.forged", req))
	require.NoError(t, srv.NC.Flush())
	_, err = findings.NextMsg(500 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "nothing published where the requester asked")
	d, err := (&guard.NATS{Conn: srv.NC}).Check(context.Background(), guard.Request{Action: listDocs})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision, "an inbox is answered as ever")
}
