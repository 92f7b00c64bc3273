package ledger_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

	got, err := ledger.CheckAgainst(cp, verifier, entries)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), got.Size)
	_, err = ledger.CheckAgainst(cp, verifier, append(entries, chain(t, 7)[6]))
	assert.NoError(t, err, "entries after the checkpoint are fine")

	fault := func(cp []byte, entries [][]byte) string {
		t.Helper()
		_, err := ledger.CheckAgainst(cp, verifier, entries)
		var f *ledger.Fault
		require.ErrorAs(t, err, &f)
		return f.Kind
	}
	// the tail cut off after the checkpoint: the chain alone still verifies
	_, err = ledger.Verify(entries[:4])
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
