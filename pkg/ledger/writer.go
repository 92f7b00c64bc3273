package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troy-audit/troy/pkg/bus"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/troy-audit/troy/pipelines"
)

// Stream holds every ledger.
const Stream = pipelines.StreamLedger

// Subject is a ledger's subject.
func Subject(ledger string) string { return "troy.ledger." + ledger }

// ValidID checks a ledger id can name a subject: 1 to 200 characters,
// none of them a space, a wildcard or a control character, no empty token.
func ValidID(id string) error {
	bad := len(id) == 0 || len(id) > 200 || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") || strings.Contains(id, "..")
	for _, r := range id {
		bad = bad || r <= ' ' || r == '*' || r == '>' || r == 0x7f
	}
	if bad {
		return fmt.Errorf("ledger id %q: use 1 to 200 characters without spaces, * or >", id)
	}
	return nil
}

// InstanceID names the ledger of one process of a service that decides
// many things (the guard, the reporter): prefix, then host and a random
// part, so each process is the one writer of its own ledger, and a NATS
// permission on troy.ledger.<prefix>.> covers that service's ledgers.
func InstanceID(prefix string) string {
	return HostID(prefix) + "-" + nuid.Next()[16:]
}

// HostID names a ledger shared by the processes of one host (troy check's
// in-process checks): prefix and the host name, made a subject token.
func HostID(prefix string) string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
	if host == "" {
		host = "host"
	}
	return prefix + "." + host
}

// ErrFenced is returned to a writer whose ledger was appended to by
// another writer since it last wrote: it must not go on.
var ErrFenced = errors.New("ledger: another writer appended to this ledger")

// Writer appends to one ledger. Each append states the stream sequence of
// the ledger's last record (expected-last-sequence-per-subject), so a
// second or stale writer is refused by the server instead of forking the
// chain; an append whose ack was lost is settled by reading what the
// ledger's last record is.
type Writer struct {
	js     jetstream.JetStream
	ledger string
	name   string

	mu      sync.Mutex
	seq     uint64   // the last record's seq in the ledger
	lastSeq uint64   // its stream sequence
	head    string   // its entry hash
	inDoubt *attempt // the last append, when its outcome is unknown
}

// Open reads where the ledger stands and returns its writer.
func Open(ctx context.Context, js jetstream.JetStream, ledger, writerName string) (*Writer, error) {
	if err := ValidID(ledger); err != nil {
		return nil, err
	}
	w := &Writer{js: js, ledger: ledger, name: writerName, head: Genesis}
	if err := w.sync(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// sync reads the ledger's last record.
func (w *Writer) sync(ctx context.Context) error {
	seq, streamSeq, data, err := w.lastRecord(ctx)
	if err != nil {
		return err
	}
	w.seq, w.lastSeq, w.head = seq, streamSeq, Genesis
	if data != nil {
		w.head = EntryHash(data)
	}
	return nil
}

// lastRecord is the ledger's last record as the stream's leader holds it:
// its seq, stream sequence and bytes (0, 0, nil for an empty ledger).
func (w *Writer) lastRecord(ctx context.Context) (seq, streamSeq uint64, data []byte, err error) {
	m, err := bus.LeaderGet(ctx, w.js.Conn(), Stream, 0, Subject(w.ledger))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil, nil
	}
	if err != nil {
		return 0, 0, nil, fmt.Errorf("ledger %s: %w", w.ledger, err)
	}
	r, err := Decode(m.Data)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("ledger %s: its last record (stream seq %d) is %w", w.ledger, m.Sequence, err)
	}
	return r.Seq, m.Sequence, m.Data, nil
}

// Resync reads where the ledger stands again (after ErrFenced, to go on
// after the other writer's records).
func (w *Writer) Resync(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sync(ctx)
}

// Head is the ledger's last seq and entry hash, as this writer knows them.
func (w *Writer) Head() (uint64, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq, w.head
}

// Append adds a record and returns its seq and entry hash.
func (w *Writer) Append(ctx context.Context, kind string, data map[string]any) (uint64, string, error) {
	return w.AppendBatch(ctx, []Entry{{Kind: kind, Data: data}})
}

// Add appends one record and waits for it: what a Batcher's Add does, for
// a caller that can wait (a one-shot CLI). A ledger that another writer
// appended to meanwhile is read again and the record goes after (a few
// times, for CLI processes sharing a ledger).
func (w *Writer) Add(kind string, data map[string]any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		_, _, err := w.Append(ctx, kind, data)
		if !errors.Is(err, ErrFenced) || attempt == 5 {
			return err
		}
		time.Sleep(time.Duration(rand.N(20*attempt)) * time.Millisecond)
		if err := w.Resync(ctx); err != nil {
			return err
		}
	}
}

// Entry is one record to append: what kind of decision, and its data.
type Entry struct {
	Kind string
	Data map[string]any
	// Build, when Data is nil, makes it when the record is written (off
	// the caller's path, for a Batcher).
	Build func() map[string]any
}

// MaxBatch is the most records one AppendBatch stores (the server's atomic
// batch limit is 1,000).
const MaxBatch = 500

// AppendBatch adds records as one atomic batch: all are stored, in order
// and contiguous in the ledger, or none is. Only the first states the
// ledger's expected last sequence — the server admits no other writer to
// the subject while the batch commits — so a batch costs one round trip
// however many records it holds. It returns the last record's seq and
// entry hash.
func (w *Writer) AppendBatch(ctx context.Context, entries []Entry) (uint64, string, error) {
	if len(entries) == 0 || len(entries) > MaxBatch {
		return 0, "", fmt.Errorf("ledger %s: a batch holds 1 to %d records, not %d", w.ledger, MaxBatch, len(entries))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.inDoubt; p != nil {
		// The last append's outcome is unknown: send the very same bytes
		// again (the server drops them if it has them) before anything else.
		if err := w.send(ctx, p); err != nil {
			return 0, "", err
		}
		if sameEntries(p.entries, entries) { // the caller's retry of it
			return w.seq, w.head, nil
		}
	}
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	a := &attempt{entries: entries, msgs: make([]*nats.Msg, len(entries)), seq: w.seq, head: w.head}
	for i, e := range entries {
		a.seq++
		if e.Data == nil && e.Build != nil {
			e.Data = e.Build()
		}
		b, err := Canonical(Record{Ledger: w.ledger, Seq: a.seq, Kind: e.Kind, TS: ts, Writer: w.name, Data: e.Data, PrevHash: a.head})
		if err != nil {
			return 0, "", err
		}
		a.head = EntryHash(b)
		m := nats.NewMsg(Subject(w.ledger))
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", w.ledger, a.seq))
		if len(entries) > 1 {
			m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		}
		a.msgs[i] = m
	}
	a.msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(w.lastSeq, 10))
	if len(entries) > 1 {
		a.msgs[len(a.msgs)-1].Header.Set(hdrBatchCommit, "1")
	}
	if err := w.send(ctx, a); err != nil {
		return 0, "", err
	}
	return w.seq, w.head, nil
}

// attempt is one append, kept whole while its outcome is unknown.
type attempt struct {
	entries []Entry
	msgs    []*nats.Msg
	seq     uint64 // the ledger seq of its last record
	head    string // and that record's entry hash
}

// send publishes an attempt and settles its outcome: stored (the writer
// moves on), refused (the server said no, or it never left: nothing was
// stored), fenced (another writer's records are there), or unknown (kept
// as inDoubt, to be sent again, byte for byte, by the next append).
func (w *Writer) send(ctx context.Context, a *attempt) error {
	readBack := 5 * time.Second // as long as the caller gave the publish, at most
	if dl, ok := ctx.Deadline(); ok {
		readBack = max(min(readBack, time.Until(dl)), 100*time.Millisecond)
	}
	if len(a.msgs) > 1 { // a batch id is the server's staging area: a new one per try
		id := nuid.Next()
		for _, m := range a.msgs {
			m.Header.Set(hdrBatchID, id)
		}
	}
	stored, refused, err := w.publish(ctx, a.msgs)
	if err == nil {
		w.seq, w.lastSeq, w.head, w.inDoubt = a.seq, stored, a.head, nil
		return nil
	}
	if refused && w.inDoubt != a { // a first try the server refused: nothing of it is stored
		if errors.Is(err, ErrFenced) {
			return fmt.Errorf("%w (%s at seq %d)", ErrFenced, w.ledger, w.seq)
		}
		return fmt.Errorf("ledger %s: append refused: %w", w.ledger, err)
	}
	// The ack may have been lost after the records were stored (or, sent
	// again, they were stored by an earlier try): what does the leader
	// hold as the ledger's last record?
	w.inDoubt = a
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBack)
	defer cancel()
	before := a.seq - uint64(len(a.msgs))
	lastSeq, lastStreamSeq, lastData, gerr := w.lastRecord(rctx)
	if gerr != nil {
		return fmt.Errorf("ledger %s: append: %w (reading back: %v; append the same records again to settle it)", w.ledger, err, gerr)
	}
	switch {
	case lastSeq == before && (before == 0 || EntryHash(lastData) == w.head):
		// Not there (yet: a write in flight may still land, which is why
		// the same bytes go again next time).
		return fmt.Errorf("ledger %s: append: %w (append the same records again to settle it)", w.ledger, err)
	case lastSeq == a.seq && bytes.Equal(lastData, a.msgs[len(a.msgs)-1].Data):
		w.seq, w.lastSeq, w.head, w.inDoubt = a.seq, lastStreamSeq, a.head, nil
		return nil // it was stored: the ack was lost
	case lastSeq < before:
		return fmt.Errorf("ledger %s: the leader holds %d records, this writer wrote %d: append the same records again to settle it", w.ledger, lastSeq, before)
	}
	w.inDoubt = nil // another writer's records are there: this one must stop
	return fmt.Errorf("%w (%s: seq %d is not this writer's)", ErrFenced, w.ledger, min(lastSeq, a.seq))
}

// sameEntries reports whether a retry carries the records in doubt: the
// same slice again (a Batcher's retry), or equal records.
func sameEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	if &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i].Kind != b[i].Kind || a[i].Build != nil || b[i].Build != nil || !reflect.DeepEqual(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// errCodeBatchDuplicateID is the server's "atomic publish batch contains
// duplicate message id" (nats.go has no constant for it).
const errCodeBatchDuplicateID jetstream.ErrorCode = 10201

// The atomic batch headers (ADR-50); nats.go has no constants for them.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// publish sends msgs (one message, or an atomic batch whose last message
// commits it) and returns the stream sequence of the last. refused is true
// when nothing can have been stored: the server answered with an error,
// or the commit never left.
func (w *Writer) publish(ctx context.Context, msgs []*nats.Msg) (seq uint64, refused bool, err error) {
	nc := w.js.Conn()
	for _, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return 0, true, err // no commit: the server stores nothing of the batch
		}
	}
	resp, err := nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if err != nil {
		definite := errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrBadSubject)
		return 0, definite, err
	}
	var ack struct {
		Error     *jetstream.APIError `json:"error"`
		Seq       uint64              `json:"seq"`
		Count     int                 `json:"count"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, false, fmt.Errorf("reading the server's ack: %w", err)
	}
	switch {
	case ack.Error != nil && (ack.Error.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ack.Error.ErrorCode == errCodeBatchDuplicateID):
		return 0, true, ErrFenced // records under these ledger seqs are there already
	case ack.Error != nil:
		return 0, true, ack.Error
	case len(msgs) > 1 && ack.Count != len(msgs):
		return 0, false, fmt.Errorf("the server committed %d of a batch of %d", ack.Count, len(msgs))
	case ack.Duplicate:
		// The server already holds a record under this ledger seq: ours
		// (a resend), or another writer's, which makes this one stale.
		got, err := bus.LeaderGet(ctx, nc, Stream, ack.Seq, "")
		if err != nil {
			return 0, false, err
		}
		if !bytes.Equal(got.Data, msgs[len(msgs)-1].Data) {
			return 0, true, ErrFenced
		}
	}
	return ack.Seq, false, nil
}

// Read returns a ledger's stored records in order.
func Read(ctx context.Context, js jetstream.JetStream, ledger string) ([][]byte, error) {
	stored, err := ReadStored(ctx, js, ledger)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(stored))
	for i, st := range stored {
		out[i] = st.Data
	}
	return out, nil
}

// Stored is a record as the stream holds it.
type Stored struct {
	StreamSeq uint64 // its entry number in the whole log (troy ledger proof)
	Subject   string
	Data      []byte
}

// ReadStored returns a ledger's stored records in order, with their
// stream sequences.
func ReadStored(ctx context.Context, js jetstream.JetStream, ledger string) ([]Stored, error) {
	s, err := js.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("ledger: stream %s: %w", Stream, err)
	}
	var out []Stored
	var after uint64
	for {
		m, err := s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(Subject(ledger)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", ledger, err)
		}
		out = append(out, Stored{StreamSeq: m.Sequence, Subject: m.Subject, Data: m.Data})
		after = m.Sequence
	}
}
