package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

func TestWriterChainsFencesAndIsSealed(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	w, err := ledger.Open(ctx, srv.JS, "run1", "runner-a")
	require.NoError(t, err)
	stale, err := ledger.Open(ctx, srv.JS, "run1", "runner-b") // opened before a writes
	require.NoError(t, err)
	for i := range 3 {
		seq, _, err := w.Append(ctx, "iteration", map[string]any{"i": i})
		require.NoError(t, err)
		assert.Equal(t, uint64(i+1), seq)
	}
	_, err = ledger.Open(ctx, srv.JS, "other", "runner-a")
	require.NoError(t, err)

	_, _, err = stale.Append(ctx, "iteration", map[string]any{"forged": true})
	assert.ErrorIs(t, err, ledger.ErrFenced, "a second writer cannot fork the chain")

	entries, err := ledger.Read(ctx, srv.JS, "run1")
	require.NoError(t, err)
	require.Len(t, entries, 3)
	head, err := ledger.Verify("run1", entries)
	require.NoError(t, err)
	_, h := w.Head()
	assert.Equal(t, h, head)

	// A writer opened later goes on from the head.
	w2, err := ledger.Open(ctx, srv.JS, "run1", "runner-c")
	require.NoError(t, err)
	seq, _, err := w2.Append(ctx, "run_end", map[string]any{"status": "complete"})
	require.NoError(t, err)
	assert.Equal(t, uint64(4), seq)
	entries, _ = ledger.Read(ctx, srv.JS, "run1")
	_, err = ledger.Verify("run1", entries)
	require.NoError(t, err)

	s, err := srv.JS.Stream(ctx, ledger.Stream)
	require.NoError(t, err)
	assert.Error(t, s.DeleteMsg(ctx, 1), "records cannot be deleted")
	assert.Error(t, s.Purge(ctx), "the ledger cannot be purged")
	entries, _ = ledger.Read(ctx, srv.JS, "run1")
	assert.Len(t, entries, 4)
}

func TestAppendBatchIsAtomicAndFenced(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	w, err := ledger.Open(ctx, srv.JS, "guard", "guard-a")
	require.NoError(t, err)
	stale, err := ledger.Open(ctx, srv.JS, "guard", "guard-b")
	require.NoError(t, err)
	other, err := ledger.Open(ctx, srv.JS, "run9", "runner")
	require.NoError(t, err)

	batch := func(n, from int) []ledger.Entry {
		var es []ledger.Entry
		for i := range n {
			es = append(es, ledger.Entry{Kind: "guard", Data: map[string]any{"i": from + i}})
		}
		return es
	}
	seq, head, err := w.AppendBatch(ctx, batch(100, 0))
	require.NoError(t, err)
	assert.Equal(t, uint64(100), seq)
	_, _, err = other.Append(ctx, "iteration", nil) // another ledger interleaves in the stream
	require.NoError(t, err)
	seq, _, err = w.AppendBatch(ctx, batch(ledger.MaxBatch, 100))
	require.NoError(t, err)
	assert.Equal(t, uint64(100+ledger.MaxBatch), seq)

	_, _, err = stale.AppendBatch(ctx, batch(10, 0))
	require.ErrorIs(t, err, ledger.ErrFenced, "a stale writer's whole batch is refused")
	_, _, err = w.AppendBatch(ctx, batch(ledger.MaxBatch+1, 0))
	require.Error(t, err, "an oversized batch is refused before anything is sent")

	entries, err := ledger.Read(ctx, srv.JS, "guard")
	require.NoError(t, err)
	require.Len(t, entries, 100+ledger.MaxBatch, "nothing of the refused batches was stored")
	got, err := ledger.Verify("guard", entries)
	require.NoError(t, err)
	_, want := w.Head()
	assert.Equal(t, want, got)
	assert.NotEqual(t, head, got)
}

// Two writers race on one ledger: the server admits one append per
// sequence, the loser is fenced (and here reads the head again and goes
// on), and the chain stays one line holding every acknowledged record once.
func TestRacingWritersAreFenced(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	type ack struct {
		writer string
		i      int
	}
	acked := make(chan ack, 400)
	fenced := make(chan int, 2)
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		w, err := ledger.Open(ctx, srv.JS, "raced", name)
		require.NoError(t, err)
		wg.Go(func() {
			n := 0
			for i := range 150 {
				_, _, err := w.Append(ctx, "iteration", map[string]any{"writer": name, "i": i})
				switch {
				case err == nil:
					acked <- ack{name, i}
				case errors.Is(err, ledger.ErrFenced):
					n++
					if err := w.Resync(ctx); err != nil {
						t.Error(err)
						return
					}
				default:
					t.Error(err)
					return
				}
			}
			fenced <- n
		})
	}
	wg.Wait()
	close(acked)
	t.Logf("fenced %d and %d times", <-fenced, <-fenced)

	entries, err := ledger.Read(ctx, srv.JS, "raced")
	require.NoError(t, err)
	_, err = ledger.Verify("raced", entries)
	require.NoError(t, err, "one line, no fork")
	stored := map[ack]int{}
	for _, e := range entries {
		r, err := ledger.Decode(e)
		require.NoError(t, err)
		assert.Equal(t, r.Writer, r.Data["writer"], "a record is written by whom it says")
		stored[ack{r.Data["writer"].(string), int(r.Data["i"].(float64))}]++
	}
	n := 0
	for a := range acked {
		assert.Equal(t, 1, stored[a], "acknowledged %v is stored once", a)
		n++
	}
	assert.Equal(t, n, len(entries), "nothing stored that was not acknowledged")
}

// A record the server refuses outright (too big to send) is not in doubt:
// it does not hold up the records after it.
func TestARefusedAppendDoesNotWedgeTheWriter(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	w, err := ledger.Open(ctx, srv.JS, "big", "runner")
	require.NoError(t, err)
	_, _, err = w.Append(ctx, "iteration", map[string]any{"blob": strings.Repeat("x", int(srv.NC.MaxPayload())+1)})
	require.Error(t, err)
	seq, _, err := w.Append(ctx, "iteration", map[string]any{"small": true})
	require.NoError(t, err, "the next record goes on")
	assert.Equal(t, uint64(1), seq)
}
