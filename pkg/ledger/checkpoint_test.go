package ledger_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

// Faults a hash chain alone cannot see, seen against a signed checkpoint.
func TestCheckpointsCatchWhatTheChainCannot(t *testing.T) {
	sk, vk, err := ledger.GenerateKey("test-log")
	require.NoError(t, err)
	signer, err := ledger.LoadSigner(sk)
	require.NoError(t, err)
	verifier, err := ledger.LoadVerifier(vk)
	require.NoError(t, err)
	entries := chain(t, 6)
	cp, err := ledger.Sign(signer, entries)
	require.NoError(t, err)

	got, err := ledger.CheckAll([][]byte{cp}, verifier, entries)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), got.Size)
	_, err = ledger.CheckAll([][]byte{cp}, verifier, append(entries, chain(t, 7)[6]))
	assert.NoError(t, err, "entries after the checkpoint are fine")

	fault := func(cp []byte, entries [][]byte) string {
		t.Helper()
		_, err := ledger.CheckAll([][]byte{cp}, verifier, entries)
		var f *ledger.Fault
		require.ErrorAs(t, err, &f)
		return f.Kind
	}
	// the tail cut off after the checkpoint: the chain alone still verifies
	_, err = ledger.Verify("run1", entries[:4])
	require.NoError(t, err)
	assert.Equal(t, "tail_cut", fault(cp, entries[:4]))

	// the whole chain rewritten consistently by someone without the key
	rewritten := chain(t, 6)
	rewritten[0] = bytes.Replace(rewritten[0], []byte(`"n":1`), []byte(`"n":100`), 1)
	assert.Equal(t, "tree_mismatch", fault(cp, rewritten))

	// a checkpoint forged with another key
	fk, _, err := ledger.GenerateKey("test-log")
	require.NoError(t, err)
	forger, err := ledger.LoadSigner(fk)
	require.NoError(t, err)
	forged, err := ledger.Sign(forger, rewritten)
	require.NoError(t, err)
	assert.Equal(t, "bad_signature", fault(forged, rewritten))
}

func testKeys(t *testing.T, name string) (note.Signer, note.Verifier) {
	t.Helper()
	sk, vk, err := ledger.GenerateKey(name)
	require.NoError(t, err)
	signer, err := ledger.LoadSigner(sk)
	require.NoError(t, err)
	verifier, err := ledger.LoadVerifier(vk)
	require.NoError(t, err)
	return signer, verifier
}

// Every entry of a log whose size is no power of two is proved in, and a
// proof shows nothing it should not.
func stored(subject string, entries [][]byte) []ledger.Stored {
	var out []ledger.Stored
	for i, e := range entries {
		out = append(out, ledger.Stored{StreamSeq: uint64(i + 1), Subject: subject, Data: e})
	}
	return out
}

func TestInclusionProofs(t *testing.T) {
	signer, verifier := testKeys(t, "test-log")
	entries := stored(ledger.Subject("run1"), chain(t, 13))
	cp, err := ledger.Sign(signer, ledger.Leaves(entries))
	require.NoError(t, err)
	for seq := uint64(1); seq <= 13; seq++ {
		p, err := ledger.Prove(entries, seq, cp)
		require.NoError(t, err, "seq %d", seq)
		rec, err := ledger.VerifyProof(p, verifier)
		require.NoError(t, err, "seq %d", seq)
		assert.Equal(t, seq, rec.Seq)
	}
	_, err = ledger.Prove(entries, 14, cp)
	assert.ErrorContains(t, err, "not in the newest checkpoint yet")

	kind := func(p *ledger.Proof) string {
		t.Helper()
		_, err := ledger.VerifyProof(p, verifier)
		var f *ledger.Fault
		require.ErrorAs(t, err, &f)
		return f.Kind
	}
	p, err := ledger.Prove(entries, 5, cp)
	require.NoError(t, err)
	edited := *p
	edited.Entry = string(chain(t, 13)[5]) // another entry, claimed at 5
	assert.Equal(t, "not_included", kind(&edited))
	moved := *p
	moved.Seq = 6
	assert.Equal(t, "not_included", kind(&moved))
	elsewhere := *p
	elsewhere.Subject = ledger.Subject("run2")
	assert.Equal(t, "not_included", kind(&elsewhere), "the subject is part of the leaf")

	// A record copied under another ledger's subject is in the log, and
	// the proof says it is not that ledger's.
	copied := stored(ledger.Subject("run2"), chain(t, 2))
	cp2, err := ledger.Sign(signer, ledger.Leaves(copied))
	require.NoError(t, err)
	p2, err := ledger.Prove(copied, 2, cp2)
	require.NoError(t, err)
	assert.Equal(t, "wrong_ledger", kind(p2))
	_, otherVerifier := testKeys(t, "test-log")
	_, err = ledger.VerifyProof(p, otherVerifier)
	assert.Error(t, err, "a proof against a checkpoint the key did not sign")
	forger, _ := testKeys(t, "test-log")
	forged, err := ledger.Sign(forger, ledger.Leaves(entries))
	require.NoError(t, err)
	p3, err := ledger.Prove(entries, 5, forged)
	require.NoError(t, err)
	assert.Equal(t, "bad_signature", kind(p3))
}

func TestCheckAllChecksEveryCheckpoint(t *testing.T) {
	signer, verifier := testKeys(t, "test-log")
	entries := chain(t, 20)
	var cps [][]byte
	for _, n := range []int{5, 0, 20, 12} {
		cp, err := ledger.Sign(signer, entries[:n])
		require.NoError(t, err)
		cps = append(cps, cp)
	}
	forger, _ := testKeys(t, "test-log")
	junk, err := ledger.Sign(forger, entries[:3])
	require.NoError(t, err)
	cps = append(cps, junk, []byte("not a checkpoint"))
	res, err := ledger.CheckAll(cps, verifier, entries)
	require.NoError(t, err)
	assert.Equal(t, ledger.Checked{Checkpoints: 4, Ignored: 2, Size: 20}, res, "checkpoints the key did not sign are counted and ignored")
	_, err = ledger.CheckAll([][]byte{junk}, verifier, entries)
	var bad *ledger.Fault
	require.ErrorAs(t, err, &bad)
	assert.Equal(t, "bad_signature", bad.Kind, "and none signed by the key is a fault")

	rewritten := append([][]byte(nil), entries...)
	rewritten[7] = chain(t, 20)[8]
	_, err = ledger.CheckAll(cps, verifier, rewritten)
	var f *ledger.Fault
	require.ErrorAs(t, err, &f)
	assert.Equal(t, "tree_mismatch", f.Kind)
	assert.Contains(t, f.Msg, "first 12 entries", "the first checkpoint the change breaks is named")

	_, err = ledger.CheckAll(cps, verifier, entries[:15])
	require.ErrorAs(t, err, &f)
	assert.Equal(t, "tail_cut", f.Kind)
}

// The checkpointer follows the stream and signs every Every entries.
func TestCheckpointerSignsAsTheLogGrows(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signer, verifier := testKeys(t, "test-log")
	w, err := ledger.Open(ctx, srv.JS, "run-cp", "runner")
	require.NoError(t, err)
	for i := range 7 {
		_, _, err := w.Append(ctx, "iteration", map[string]any{"i": i})
		require.NoError(t, err)
	}
	c := &ledger.Checkpointer{JS: srv.JS, Signer: signer, Every: 5, Interval: time.Hour}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool { return c.Size() == 7 }, 10*time.Second, 10*time.Millisecond, "it read the log so far")
	var batch []ledger.Entry
	for i := range 4 {
		batch = append(batch, ledger.Entry{Kind: "iteration", Data: map[string]any{"i": 7 + i}})
	}
	_, _, err = w.AppendBatch(ctx, batch)
	require.NoError(t, err)

	var cps [][]byte
	require.Eventually(t, func() bool {
		cps, err = ledger.Checkpoints(ctx, srv.JS)
		return err == nil && len(cps) > 0 && c.Size() == 11
	}, 10*time.Second, 20*time.Millisecond)
	stored, err := ledger.ReadAll(ctx, srv.JS)
	require.NoError(t, err)
	res, err := ledger.CheckAll(cps, verifier, ledger.Leaves(stored))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.Size, uint64(5))
	cancel()
	require.NoError(t, <-done)
}

// A restarted checkpointer goes on from the newest checkpoint its key
// signed: it signs nothing for a log that has not grown, and nothing at
// all for a log that no longer has the root it signed.
func TestCheckpointerResumes(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx := context.Background()
	sk, _, err := ledger.GenerateKey("resume-log")
	require.NoError(t, err)
	signer, verifier, err := ledger.LoadKeys(sk)
	require.NoError(t, err)
	w, err := ledger.Open(ctx, srv.JS, "run-r", "runner")
	require.NoError(t, err)
	for i := range 6 {
		_, _, err := w.Append(ctx, "iteration", map[string]any{"i": i})
		require.NoError(t, err)
	}
	run := func(c *ledger.Checkpointer, until func() bool) {
		t.Helper()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		require.Eventually(t, until, 10*time.Second, 10*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
	}
	count := func() int {
		cps, err := ledger.Checkpoints(ctx, srv.JS)
		require.NoError(t, err)
		return len(cps)
	}
	first := &ledger.Checkpointer{JS: srv.JS, Signer: signer, Verifier: verifier, Every: 1, Interval: 20 * time.Millisecond}
	run(first, func() bool { return count() == 1 && first.Size() == 6 })

	again := &ledger.Checkpointer{JS: srv.JS, Signer: signer, Verifier: verifier, Every: 1, Interval: 20 * time.Millisecond}
	run(again, func() bool { return again.Size() == 6 })
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, 1, count(), "the log did not grow: nothing re-signed")

	// A checkpoint of some other log, signed by the same key, is newest:
	// the log does not have its root, so nothing more is signed.
	other, err := ledger.Sign(signer, [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	require.NoError(t, err)
	_, err = srv.JS.Publish(ctx, ledger.CheckpointSubject, other)
	require.NoError(t, err)
	_, _, err = w.Append(ctx, "iteration", map[string]any{"i": 6})
	require.NoError(t, err)
	wary := &ledger.Checkpointer{JS: srv.JS, Signer: signer, Verifier: verifier, Every: 1, Interval: 20 * time.Millisecond}
	run(wary, func() bool { return wary.Fault() != nil })
	assert.ErrorContains(t, wary.Fault(), "the first 3 entries no longer hash to the root this key signed for them")
	assert.Equal(t, 2, count(), "a log that does not match what the key signed is not signed again")
}
