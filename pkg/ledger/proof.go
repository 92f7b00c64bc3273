package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"golang.org/x/mod/sumdb/note"
)

// Proof shows, to anyone holding the signer's public key and nothing else,
// that one record is in the log a signed checkpoint vouches for.
type Proof struct {
	Seq        uint64   `json:"seq"`        // the entry's stream sequence (its leaf is Seq-1)
	Subject    string   `json:"subject"`    // where it is stored: troy.ledger.<its ledger>
	Entry      string   `json:"entry"`      // the stored record, byte for byte
	TreeSize   uint64   `json:"tree_size"`  // the checkpoint's size
	Hashes     []string `json:"hashes"`     // the RFC 6962 inclusion proof, hex
	Checkpoint string   `json:"checkpoint"` // the signed checkpoint
}

// UnsignedSize reads a checkpoint's size without checking its signature
// (to choose what to prove against; verification checks it).
func UnsignedSize(checkpoint []byte) (uint64, error) {
	body, _, ok := bytes.Cut(checkpoint, []byte("\n\n"))
	if !ok {
		return 0, errors.New("not a signed checkpoint (no signature block)")
	}
	var cp log.Checkpoint
	if _, err := cp.Unmarshal(append(body, '\n')); err != nil {
		return 0, fmt.Errorf("not a checkpoint: %w", err)
	}
	return cp.Size, nil
}

// Prove makes the inclusion proof of the entry at stream sequence seq in
// the log of the checkpoint, from the log's entries (in stream order).
func Prove(stored []Stored, seq uint64, checkpoint []byte) (*Proof, error) {
	entries := Leaves(stored)
	size, err := UnsignedSize(checkpoint)
	if err != nil {
		return nil, err
	}
	switch {
	case seq == 0:
		return nil, errors.New("entries are numbered from 1")
	case seq > size:
		return nil, fmt.Errorf("entry %d is not in the newest checkpoint yet (it covers %d entries): sign one (troy ledger checkpoint) or wait for the checkpointer", seq, size)
	case uint64(len(entries)) < size:
		return nil, &Fault{Index: len(entries), Kind: "tail_cut", Msg: fmt.Sprintf("the log has %d entries; the checkpoint signed %d", len(entries), size)}
	}
	leaves := make([][]byte, size)
	for i := range leaves {
		leaves[i] = hasher.HashLeaf(entries[i])
	}
	nodes, err := proof.Inclusion(seq-1, size)
	if err != nil {
		return nil, err
	}
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		begin, end := id.Coverage()
		if hashes[i], err = rangeRoot(leaves[begin:end]); err != nil {
			return nil, err
		}
	}
	if hashes, err = nodes.Rehash(hashes, hasher.HashChildren); err != nil {
		return nil, err
	}
	p := &Proof{Seq: seq, Subject: stored[seq-1].Subject, Entry: string(stored[seq-1].Data), TreeSize: size, Checkpoint: string(checkpoint)}
	for _, h := range hashes {
		p.Hashes = append(p.Hashes, hex.EncodeToString(h))
	}
	return p, nil
}

func rangeRoot(leafHashes [][]byte) ([]byte, error) {
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	for _, h := range leafHashes {
		if err := r.Append(h, nil); err != nil {
			return nil, err
		}
	}
	return r.GetRootHash(nil)
}

// VerifyProof checks a proof offline: the checkpoint's signature, the
// entry's canonical bytes, and that the entry hashes up to the signed
// root. It returns the entry as a record.
func VerifyProof(p *Proof, verifier note.Verifier) (Record, error) {
	cp, _, _, err := log.ParseCheckpoint([]byte(p.Checkpoint), Origin(verifier.Name()), verifier)
	if err != nil {
		return Record{}, &Fault{Kind: "bad_signature", Msg: err.Error()}
	}
	if cp.Size != p.TreeSize {
		return Record{}, &Fault{Kind: "tree_mismatch", Msg: fmt.Sprintf("the proof is for %d entries, its checkpoint signed %d", p.TreeSize, cp.Size)}
	}
	rec, err := Decode([]byte(p.Entry))
	if err != nil {
		return rec, &Fault{Seq: rec.Seq, Kind: "not_canonical", Msg: err.Error()}
	}
	hashes := make([][]byte, len(p.Hashes))
	for i, h := range p.Hashes {
		if hashes[i], err = hex.DecodeString(h); err != nil {
			return rec, &Fault{Kind: "unreadable", Msg: fmt.Sprintf("proof hash %d: %v", i, err)}
		}
	}
	if p.Seq == 0 {
		return rec, &Fault{Kind: "unreadable", Msg: "entries are numbered from 1"}
	}
	if err := proof.VerifyInclusion(hasher, p.Seq-1, cp.Size, hasher.HashLeaf(Leaf(p.Subject, []byte(p.Entry))), hashes, cp.Hash); err != nil {
		return rec, &Fault{Kind: "not_included", Msg: fmt.Sprintf("entry %d does not hash up to the signed root: %v", p.Seq, err)}
	}
	if p.Subject != Subject(rec.Ledger) {
		return rec, &Fault{Seq: rec.Seq, Kind: "wrong_ledger", Msg: fmt.Sprintf("a record of ledger %q stored on %s (copied there)", rec.Ledger, p.Subject)}
	}
	return rec, nil
}

// Checkpoints returns every stored checkpoint, oldest first.
func Checkpoints(ctx context.Context, js jetstream.JetStream) ([][]byte, error) {
	s, err := js.Stream(ctx, CheckpointStream)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	var after uint64
	for {
		m, err := s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(CheckpointSubject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m.Data)
		after = m.Sequence
	}
}

// Checked is what CheckAll found.
type Checked struct {
	Checkpoints int    // signed by the key, and consistent with the log
	Ignored     int    // not signed by the key: forged, or another key's
	Size        uint64 // the largest checkpoint's size
}

// CheckAll verifies every checkpoint signed by the verifier's key against
// the log (the leaves of every entry, in order), in one pass over them.
// Checkpoints the key did not sign are counted and ignored (anyone who
// may publish could add one, and none can be deleted); none signed at all
// is a bad_signature fault.
func CheckAll(checkpoints [][]byte, verifier note.Verifier, entries [][]byte) (Checked, error) {
	var res Checked
	cps := make([]*log.Checkpoint, 0, len(checkpoints))
	var firstErr error
	for _, b := range checkpoints {
		cp, _, _, err := log.ParseCheckpoint(b, Origin(verifier.Name()), verifier)
		if err != nil {
			res.Ignored++
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		cps = append(cps, cp)
	}
	if len(cps) == 0 {
		return res, &Fault{Kind: "bad_signature", Msg: fmt.Sprintf("none of %d checkpoint(s) is signed by %s: %v", len(checkpoints), verifier.Name(), firstErr)}
	}
	sort.SliceStable(cps, func(i, j int) bool { return cps[i].Size < cps[j].Size })
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	for _, cp := range cps {
		if uint64(len(entries)) < cp.Size {
			return res, &Fault{Index: len(entries), Kind: "tail_cut",
				Msg: fmt.Sprintf("the log has %d entries; a checkpoint signed %d (entries were removed)", len(entries), cp.Size)}
		}
		for r.End() < cp.Size {
			if err := r.Append(hasher.HashLeaf(entries[r.End()]), nil); err != nil {
				return res, err
			}
		}
		root := hasher.EmptyRoot()
		if cp.Size > 0 {
			var err error
			if root, err = r.GetRootHash(nil); err != nil {
				return res, err
			}
		}
		if !bytes.Equal(root, cp.Hash) {
			return res, &Fault{Kind: "tree_mismatch",
				Msg: fmt.Sprintf("the first %d entries do not hash to the root signed for them: the log was changed after it was checkpointed", cp.Size)}
		}
		res.Checkpoints++
		res.Size = cp.Size
	}
	return res, nil
}
