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
	b, err := ledger.OpenBatcher(ctx, srv.JS, "guard-test", "guard", ledger.BatcherOptions{Interval: 10 * time.Millisecond})
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
	_, err = ledger.Verify(entries)
	require.NoError(t, err)
	last, err := ledger.Decode(entries[n-1])
	require.NoError(t, err)
	assert.EqualValues(t, n-1, last.Data["i"], "in the order they were added")
}

func TestBatcherReportsBeingBehind(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	b, err := ledger.OpenBatcher(ctx, srv.JS, "guard-slow", "guard", ledger.BatcherOptions{Interval: time.Hour, Queue: 3, Timeout: 200 * time.Millisecond})
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
