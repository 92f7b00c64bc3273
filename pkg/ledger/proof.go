package ledger

import (
	"bytes"
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
func Prove(entries [][]byte, seq uint64, checkpoint []byte) (*Proof, error) {
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
	p := &Proof{Seq: seq, Entry: string(entries[seq-1]), TreeSize: size, Checkpoint: string(checkpoint)}
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
	if err := proof.VerifyInclusion(hasher, p.Seq-1, cp.Size, hasher.HashLeaf([]byte(p.Entry)), hashes, cp.Hash); err != nil {
		return rec, &Fault{Kind: "not_included", Msg: fmt.Sprintf("entry %d does not hash up to the signed root: %v", p.Seq, err)}
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

// CheckAll verifies every checkpoint's signature and that the log (every
// entry, in order) still holds what each one signed, in one pass over the
// entries. It returns the largest size checked.
func CheckAll(checkpoints [][]byte, verifier note.Verifier, entries [][]byte) (uint64, error) {
	cps := make([]*log.Checkpoint, 0, len(checkpoints))
	for i, b := range checkpoints {
		cp, _, _, err := log.ParseCheckpoint(b, Origin(verifier.Name()), verifier)
		if err != nil {
			return 0, &Fault{Index: i, Kind: "bad_signature", Msg: fmt.Sprintf("checkpoint %d of %d: %v", i+1, len(checkpoints), err)}
		}
		cps = append(cps, cp)
	}
	sort.SliceStable(cps, func(i, j int) bool { return cps[i].Size < cps[j].Size })
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	var largest uint64
	for _, cp := range cps {
		if uint64(len(entries)) < cp.Size {
			return largest, &Fault{Index: len(entries), Kind: "tail_cut",
				Msg: fmt.Sprintf("the log has %d entries; a checkpoint signed %d (entries were removed)", len(entries), cp.Size)}
		}
		for r.End() < cp.Size {
			if err := r.Append(hasher.HashLeaf(entries[r.End()]), nil); err != nil {
				return largest, err
			}
		}
		root := hasher.EmptyRoot()
		if cp.Size > 0 {
			var err error
			if root, err = r.GetRootHash(nil); err != nil {
				return largest, err
			}
		}
		if !bytes.Equal(root, cp.Hash) {
			return largest, &Fault{Kind: "tree_mismatch",
				Msg: fmt.Sprintf("the first %d entries do not hash to the root signed for them: the log was changed after it was checkpointed", cp.Size)}
		}
		largest = cp.Size
	}
	return largest, nil
}
