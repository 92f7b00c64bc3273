package ledger_test

import (
	"bytes"
	"testing"

	"github.com/troy-audit/troy/pkg/ledger"
)

// FuzzVerify: stored bytes are whatever someone with access wrote there;
// any of them is verified or refused with a fault, never a panic, and an
// accepted chain is contiguous from seq 1.
func FuzzVerify(f *testing.F) {
	b, _ := ledger.Canonical(ledger.Record{Ledger: "l", Seq: 1, Kind: "k", TS: "t", Writer: "w", PrevHash: ledger.Genesis, Data: map[string]any{"a": 1}})
	f.Add(b, b)
	f.Add([]byte(`{"seq":1}`), []byte(`not json`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		entries := [][]byte{first, second}
		if _, err := ledger.Verify(entries); err != nil {
			return
		}
		for i, e := range entries {
			r, err := ledger.Decode(e)
			if err != nil || r.Seq != uint64(i+1) {
				t.Fatalf("accepted entry %d: %q (%v)", i, e, err)
			}
		}
		if bytes.Equal(first, second) {
			t.Fatal("the same record twice accepted")
		}
	})
}
