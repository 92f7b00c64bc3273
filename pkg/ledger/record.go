// Package ledger is troy's decision ledger: every decision an agent run,
// the guard or an audit makes is a record, records of one ledger (a run, a
// trace) are hash-chained, and each is stored as its RFC 8785 canonical
// JSON bytes in an append-only JetStream stream that refuses deletes and
// purges. Anyone holding the bytes can recompute every hash.
package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
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
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// Digest is the SHA-256 (hex) of v's canonical JSON: what a record keeps
// of arguments it must not store (they may hold secrets), enough to prove
// later which arguments they were.
func Digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		b = nil
	}
	d, err := DigestJSON(b)
	if err != nil {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	return d
}

// DigestJSON is the SHA-256 (hex) of a JSON document's RFC 8785 form: the
// same however the document is indented or its keys ordered, so a file
// written pretty-printed can be checked against it.
func DigestJSON(b []byte) (string, error) {
	c, err := jcs.Transform(b)
	if err != nil {
		return "", fmt.Errorf("ledger: digest: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
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
	if f := recordFault(b); f != nil {
		return r, errors.New(f.Msg)
	}
	return r, nil
}

// Verify checks the records stored for one ledger, in order: canonical
// bytes, each naming that ledger, contiguous seq from 1, each linked to the
// previous entry's hash. It returns the head hash, or the first fault. (A
// cut tail is only seen against a signed checkpoint.) Entries are read and
// hashed on every core; only the links are followed in order.
func Verify(ledger string, entries [][]byte) (head string, err error) {
	checked := make([]checkedEntry, len(entries))
	parallel(len(entries), func(i int) { checked[i] = check(entries[i]) })
	prev := Genesis
	for i, c := range checked {
		switch {
		case c.fault != nil:
			c.fault.Index = i
			return "", c.fault
		case c.Ledger != ledger:
			return "", &Fault{Index: i, Seq: c.Seq, Kind: "wrong_ledger", Msg: fmt.Sprintf("a record of ledger %q stored in ledger %q (copied there)", c.Ledger, ledger)}
		case c.Seq != uint64(i+1):
			return "", &Fault{Index: i, Seq: c.Seq, Kind: "seq_gap", Msg: fmt.Sprintf("seq %d where %d belongs (a record deleted, added or moved)", c.Seq, i+1)}
		case c.PrevHash != prev:
			return "", &Fault{Index: i, Seq: c.Seq, Kind: "prev_mismatch", Msg: fmt.Sprintf("prev_hash %.12s… is not the previous entry's %.12s… (an earlier record was changed)", c.PrevHash, prev)}
		}
		prev = c.hash
	}
	return prev, nil
}

// checkedEntry is what Verify needs of one record.
type checkedEntry struct {
	Ledger   string `json:"ledger"`
	Seq      uint64 `json:"seq"`
	PrevHash string `json:"prev_hash"`
	hash     string
	fault    *Fault
}

// check reads the chain fields of one stored record (its data is not
// decoded) and confirms the bytes are canonical.
func check(b []byte) (c checkedEntry) {
	if err := json.Unmarshal(b, &c); err != nil {
		c.fault = &Fault{Kind: "unreadable", Msg: "unreadable: " + err.Error()}
		return c
	}
	if c.fault = recordFault(b); c.fault != nil {
		c.fault.Seq = c.Seq
		return c
	}
	c.hash = EntryHash(b)
	return c
}

// parallel runs fn(0…n-1) on every core, in contiguous chunks.
func parallel(n int, fn func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w * n / workers; i < (w+1)*n/workers; i++ {
				fn(i)
			}
		})
	}
	wg.Wait()
}
