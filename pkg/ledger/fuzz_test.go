package ledger_test

import (
	"bytes"
	"testing"

	"github.com/gowebpki/jcs"

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
		if _, err := ledger.Verify("l", entries); err != nil {
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

// FuzzIsCanonical holds the one-pass check to the reference transform:
// bytes are canonical exactly when jcs.Transform gives them back unchanged.
func FuzzIsCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x"]}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `[1.5,-0,1e21,1E3,0.1]`,
		`"\u001f\n\u0041"`, `{"\ud83d\ude00":1,"\uffff":2}`, `{"😀":1,"":2}`, `{"":1}`, ` 1`, `"\/"`, `[1e+21,-1.5e-7,123456789012345678]`,
		"\"\xff\"", `{"a" :1}`, `[]`, `{}`, `"\u00e9"`, `"é"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := jcs.Transform(b)
		want := err == nil && bytes.Equal(out, b)
		if got := ledger.IsCanonical(b); got != want {
			t.Fatalf("IsCanonical(%q) = %v, jcs.Transform says %v (%q, %v)", b, got, want, out, err)
		}
	})
}

// FuzzVerifyProof: a proof file comes from anyone; whatever it holds is
// refused with a fault or accepted only when it hashes up to a root the
// key signed — never a panic.
func FuzzVerifyProof(f *testing.F) {
	sk, vk, _ := ledger.GenerateKey("fuzz-log")
	signer, _ := ledger.LoadSigner(sk)
	verifier, _ := ledger.LoadVerifier(vk)
	rec, _ := ledger.Canonical(ledger.Record{Ledger: "l", Seq: 1, Kind: "k", TS: "t", Writer: "w", PrevHash: ledger.Genesis})
	stored := []ledger.Stored{{StreamSeq: 1, Subject: ledger.Subject("l"), Data: rec}, {StreamSeq: 2, Subject: ledger.Subject("l"), Data: []byte("x")}}
	cp, _ := ledger.Sign(signer, ledger.Leaves(stored))
	good, _ := ledger.Prove(stored, 1, cp)
	f.Add(good.Seq, good.Subject, good.Entry, good.TreeSize, good.Hashes[0], good.Checkpoint)
	f.Add(uint64(0), "", "", uint64(0), "zz", "not a checkpoint")
	f.Fuzz(func(t *testing.T, seq uint64, subject, entry string, size uint64, hash, checkpoint string) {
		p := &ledger.Proof{Seq: seq, Subject: subject, Entry: entry, TreeSize: size, Hashes: []string{hash}, Checkpoint: checkpoint}
		if _, err := ledger.VerifyProof(p, verifier); err == nil && (seq != 1 || entry != string(rec) || subject != ledger.Subject("l")) {
			t.Fatalf("accepted a proof of something the log does not hold: %+v", p)
		}
	})
}
