package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

func TestBatcherWritesEveryRecordInOrder(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	b, err := ledger.OpenBatcher(ctx, srv.JS, "guard-test", "guard", ledger.BatcherOptions{})
	require.NoError(t, err)
	const n = 1234
	for i := range n {
		require.NoError(t, b.Add("guard", map[string]any{"i": i}))
	}
	require.NoError(t, b.Close(ctx))
	assert.Error(t, b.Add("guard", nil), "a closed batcher takes nothing")
	assert.EqualValues(t, n, b.Appended.Load())

	entries, err := ledger.Read(ctx, srv.JS, "guard-test")
	require.NoError(t, err)
	require.Len(t, entries, n)
	_, err = ledger.Verify("guard-test", entries)
	require.NoError(t, err)
	last, err := ledger.Decode(entries[n-1])
	require.NoError(t, err)
	assert.EqualValues(t, n-1, last.Data["i"], "in the order they were added")
}

func TestBatcherReportsBeingBehind(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	b, err := ledger.OpenBatcher(ctx, srv.JS, "guard-slow", "guard", ledger.BatcherOptions{Queue: 3, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	srv.NC.Close() // nothing can be written now
	var behind error
	for i := 0; i < 1000 && behind == nil; i++ {
		behind = b.Add("guard", map[string]any{"i": i})
	}
	require.ErrorIs(t, behind, ledger.ErrBehind, "a full queue is refused, not dropped")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	assert.ErrorContains(t, b.Close(cctx), "not written", "what could not be written is reported")
}

// AddWait returns once the record is stored; a batcher fenced by another
// writer stops and refuses every record after, instead of interleaving.
func TestBatcherWaitsAndStopsWhenFenced(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	b, err := ledger.OpenBatcher(ctx, srv.JS, "audits", "reporter", ledger.BatcherOptions{})
	require.NoError(t, err)
	require.NoError(t, b.AddWait(ctx, ledger.Entry{Kind: "audit", Data: map[string]any{"trace_id": "t1"}}))
	entries, err := ledger.Read(ctx, srv.JS, "audits")
	require.NoError(t, err)
	require.Len(t, entries, 1, "stored when AddWait returned")

	other, err := ledger.Open(ctx, srv.JS, "audits", "intruder")
	require.NoError(t, err)
	_, _, err = other.Append(ctx, "audit", map[string]any{"trace_id": "forged"})
	require.NoError(t, err)
	err = b.AddWait(ctx, ledger.Entry{Kind: "audit", Data: map[string]any{"trace_id": "t2"}})
	require.ErrorIs(t, err, ledger.ErrFenced)
	assert.ErrorIs(t, b.Add("audit", map[string]any{"trace_id": "t3"}), ledger.ErrFenced, "nothing more is taken")
	entries, err = ledger.Read(ctx, srv.JS, "audits")
	require.NoError(t, err)
	assert.Len(t, entries, 2, "the fenced record was not written after the intruder's")
	assert.Error(t, b.Close(ctx))
}
