// Package ledger is troy's decision ledger: every decision an agent run,
// the guard or an audit makes is a record, records of one ledger (a run, a
// trace) are hash-chained, and each is stored as its RFC 8785 canonical
// JSON bytes in an append-only JetStream stream that refuses deletes and
// purges. Anyone holding the bytes can recompute every hash.
package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
)

// Genesis is the previous hash of a ledger's first record.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// domain separates ledger entry hashes from any other SHA-256 of the same
// bytes.
const domain = "troy-ledger-entry-v1\x00"

// Record is one decision.
type Record struct {
	Ledger   string         `json:"ledger"` // run or trace id
	Seq      uint64         `json:"seq"`    // 1, 2, … within the ledger
	Kind     string         `json:"kind"`   // iteration, tool_call, run_end, guard, audit
	TS       string         `json:"ts"`     // RFC 3339, UTC
	Writer   string         `json:"writer"` // who appended it
	Data     map[string]any `json:"data"`
	PrevHash string         `json:"prev_hash"`
}

// Canonical is a record's stored bytes: RFC 8785 JSON.
func Canonical(r Record) ([]byte, error) {
	if r.TS == "" {
		r.TS = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if r.Data == nil {
		r.Data = map[string]any{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("ledger: record: %w", err)
	}
	return jcs.Transform(b)
}

// EntryHash is the hash of a record's canonical bytes, hex.
func EntryHash(canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil))
}

// Fault is the first problem verification found.
type Fault struct {
	Index int    // position in what was verified (0-based)
	Seq   uint64 // the record's seq, when it could be read
	Kind  string // not_canonical, unreadable, wrong_ledger, seq_gap, prev_mismatch
	Msg   string
}

func (f *Fault) Error() string {
	return fmt.Sprintf("ledger fault at entry %d (seq %d): %s: %s", f.Index, f.Seq, f.Kind, f.Msg)
}

// Decode reads a stored record, refusing bytes that are not canonical
// (an edit that re-serialised the JSON shows here too).
func Decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("unreadable: %w", err)
	}
	c, err := jcs.Transform(b)
	if err != nil {
		return r, fmt.Errorf("unreadable: %w", err)
	}
	if !bytes.Equal(c, b) {
		return r, errors.New("not in canonical form")
	}
	return r, nil
}

// Verify checks one ledger's records in order: canonical bytes, one ledger,
// contiguous seq from 1, each linked to the previous entry's hash. It
// returns the head hash, or the first fault. (A cut tail is only seen
// against a signed checkpoint.)
func Verify(entries [][]byte) (head string, err error) {
	prev := Genesis
	var ledger string
	for i, b := range entries {
		r, derr := Decode(b)
		if derr != nil {
			kind := "unreadable"
			if derr.Error() == "not in canonical form" {
				kind = "not_canonical"
			}
			return "", &Fault{Index: i, Seq: r.Seq, Kind: kind, Msg: derr.Error()}
		}
		if i == 0 {
			ledger = r.Ledger
		}
		switch {
		case r.Ledger != ledger:
			return "", &Fault{Index: i, Seq: r.Seq, Kind: "wrong_ledger", Msg: fmt.Sprintf("record of ledger %q among %q", r.Ledger, ledger)}
		case r.Seq != uint64(i+1):
			return "", &Fault{Index: i, Seq: r.Seq, Kind: "seq_gap", Msg: fmt.Sprintf("seq %d where %d belongs (a record deleted, added or moved)", r.Seq, i+1)}
		case r.PrevHash != prev:
			return "", &Fault{Index: i, Seq: r.Seq, Kind: "prev_mismatch", Msg: fmt.Sprintf("prev_hash %.12s… is not the previous entry's %.12s… (an earlier record was changed)", r.PrevHash, prev)}
		}
		prev = EntryHash(b)
	}
	return prev, nil
}
