package ledger_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/ledger"
)

func chain(t *testing.T, n int) [][]byte {
	t.Helper()
	prev := ledger.Genesis
	var out [][]byte
	for i := 1; i <= n; i++ {
		b, err := ledger.Canonical(ledger.Record{Ledger: "run1", Seq: uint64(i), Kind: "iteration", Writer: "w",
			TS: "2026-11-30T20:00:00Z", Data: map[string]any{"tool": "file_system", "n": i, "note": "é<>&"}, PrevHash: prev})
		require.NoError(t, err)
		out = append(out, b)
		prev = ledger.EntryHash(b)
	}
	return out
}

func TestCanonicalBytes(t *testing.T) {
	b, err := ledger.Canonical(ledger.Record{Ledger: "l", Seq: 1, Kind: "k", TS: "t", Writer: "w", PrevHash: ledger.Genesis,
		Data: map[string]any{"b": 1.0, "a": []any{"x", 2.5}}})
	require.NoError(t, err)
	assert.Equal(t, `{"data":{"a":["x",2.5],"b":1},"kind":"k","ledger":"l","prev_hash":"`+ledger.Genesis+`","seq":1,"ts":"t","writer":"w"}`, string(b))
}

func TestVerifyFindsEachFault(t *testing.T) {
	good := chain(t, 5)
	head, err := ledger.Verify("run1", good)
	require.NoError(t, err)
	assert.Equal(t, ledger.EntryHash(good[4]), head)

	fault := func(entries [][]byte) *ledger.Fault {
		t.Helper()
		_, err := ledger.Verify("run1", entries)
		var f *ledger.Fault
		require.ErrorAs(t, err, &f)
		return f
	}
	edited := append([][]byte(nil), good...)
	edited[1] = bytes.Replace(good[1], []byte(`"n":2`), []byte(`"n":9`), 1)
	f := fault(edited)
	assert.Equal(t, "prev_mismatch", f.Kind, "the edit breaks the next record's link")
	assert.Equal(t, uint64(3), f.Seq)

	deleted := append(append([][]byte(nil), good[:2]...), good[3:]...)
	assert.Equal(t, "seq_gap", fault(deleted).Kind)

	swapped := [][]byte{good[0], good[2], good[1], good[3], good[4]}
	assert.Equal(t, "seq_gap", fault(swapped).Kind)

	reformatted := append([][]byte(nil), good...)
	reformatted[0] = bytes.Replace(good[0], []byte(`,"kind"`), []byte(`, "kind"`), 1)
	assert.Equal(t, "not_canonical", fault(reformatted).Kind)

	_, err = ledger.Verify("run1", good[:3])
	assert.NoError(t, err, "a cut tail is only visible against a checkpoint")

	_, err = ledger.Verify("run2", good)
	var f2 *ledger.Fault
	require.ErrorAs(t, err, &f2)
	assert.Equal(t, "wrong_ledger", f2.Kind, "records copied under another ledger")

	// canonical, but with a key Go's decoder would take for "seq"
	shadowed := append([][]byte(nil), good...)
	shadowed[0] = append(bytes.TrimSuffix(good[0], []byte("}")), []byte(`,"ſeq":5}`)...)
	require.True(t, ledger.IsCanonical(shadowed[0]))
	f = fault(shadowed)
	assert.Equal(t, "unreadable", f.Kind)
	assert.Contains(t, f.Msg, "exactly the keys")
}

func TestIsCanonicalAtTheNestingLimit(t *testing.T) {
	for _, depth := range []int{10000, 10001} {
		b := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		out, err := jcs.Transform(b)
		assert.Equal(t, err == nil && bytes.Equal(out, b), ledger.IsCanonical(b), "depth %d", depth)
	}
}
