package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

// TestLedgerSurvivesLosingANode appends to a ledger replicated on a
// 3-node cluster and shuts down the ledger stream's leader a third of the
// way through: every record is stored exactly once, in order, with no gap,
// and the chain holds. Appends that fail while the cluster elects a new
// leader are retried with the same records, which the writer settles.
func TestLedgerSurvivesLosingANode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: waits for a leader election")
	}
	c := bustest.RunCluster(t, 3)
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	all, err := pipelines.Load()
	require.NoError(t, err)
	topo := &pipelines.Topology{Replicas: 3}
	for _, s := range all.Streams {
		if s.Name == ledger.Stream || s.Name == ledger.CheckpointStream {
			topo.Streams = append(topo.Streams, s)
		}
	}
	ctx := context.Background()
	require.Eventually(t, func() bool { return bus.Provision(ctx, js, topo) == nil }, 30*time.Second, 100*time.Millisecond)

	w, err := ledger.Open(ctx, js, "run-ha", "runner")
	require.NoError(t, err)
	const total = 600
	s, err := js.Stream(ctx, ledger.Stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	leader := c.Server(info.Cluster.Leader)
	require.NotNil(t, leader, "leader %q", info.Cluster.Leader)
	killed := make(chan uint64, 1)
	go func() { // mid-append, whatever the writer is doing
		for {
			if seq, _ := w.Head(); seq >= total/3 {
				leader.Shutdown()
				killed <- seq
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	retried := 0
	for i := 0; i < total; {
		// alternately ten records in one atomic batch and ten one by one
		var entries []ledger.Entry
		n := 1
		if (i/10)%2 == 0 {
			n = 10
		}
		for k := range n {
			entries = append(entries, ledger.Entry{Kind: "iteration", Data: map[string]any{"i": i + k}})
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _, err := w.AppendBatch(actx, entries)
			cancel()
			if err == nil {
				break
			}
			require.False(t, errors.Is(err, ledger.ErrFenced), "the writer is the only one: %v", err)
			require.True(t, time.Now().Before(deadline), "no append for 60s: %v", err)
			retried++
			time.Sleep(100 * time.Millisecond)
		}
		i += n
	}
	t.Logf("shut down the stream leader %s after %d records; %d appends were retried", leader.Name(), <-killed, retried)

	var stored []ledger.Stored
	require.Eventually(t, func() bool {
		stored, err = ledger.ReadAll(ctx, js)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the log reads whole (no gap): %v", err)
	require.Len(t, stored, total, "every record exactly once")
	var entries [][]byte
	for _, st := range stored {
		entries = append(entries, st.Data)
	}
	_, err = ledger.Verify("run-ha", entries)
	require.NoError(t, err, "the chain holds")
	for i, e := range entries {
		r, err := ledger.Decode(e)
		require.NoError(t, err)
		assert.EqualValues(t, i, r.Data["i"], "in order")
	}
}
