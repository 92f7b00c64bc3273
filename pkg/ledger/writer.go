package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
)

// Stream holds every ledger.
const Stream = pipelines.StreamLedger

// Subject is a ledger's subject.
func Subject(ledger string) string { return "troy.ledger." + ledger }

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
	stream jetstream.Stream
	ledger string
	name   string

	mu      sync.Mutex
	seq     uint64 // the last record's seq in the ledger
	lastSeq uint64 // its stream sequence
	head    string // its entry hash
}

// Open reads where the ledger stands and returns its writer.
func Open(ctx context.Context, js jetstream.JetStream, ledger, writerName string) (*Writer, error) {
	s, err := js.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("ledger: stream %s: %w", Stream, err)
	}
	w := &Writer{js: js, stream: s, ledger: ledger, name: writerName, head: Genesis}
	if err := w.sync(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// sync reads the ledger's last record.
func (w *Writer) sync(ctx context.Context) error {
	m, err := w.stream.GetLastMsgForSubject(ctx, Subject(w.ledger))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		w.seq, w.lastSeq, w.head = 0, 0, Genesis
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger %s: %w", w.ledger, err)
	}
	r, err := Decode(m.Data)
	if err != nil {
		return fmt.Errorf("ledger %s: its last record (stream seq %d) is %w", w.ledger, m.Sequence, err)
	}
	w.seq, w.lastSeq, w.head = r.Seq, m.Sequence, EntryHash(m.Data)
	return nil
}

// Head is the ledger's last seq and entry hash, as this writer knows them.
func (w *Writer) Head() (uint64, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq, w.head
}

// Append adds a record and returns its seq and entry hash.
func (w *Writer) Append(ctx context.Context, kind string, data map[string]any) (uint64, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := Record{Ledger: w.ledger, Seq: w.seq + 1, Kind: kind, TS: time.Now().UTC().Format(time.RFC3339Nano),
		Writer: w.name, Data: data, PrevHash: w.head}
	b, err := Canonical(rec)
	if err != nil {
		return 0, "", err
	}
	m := nats.NewMsg(Subject(w.ledger))
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", w.ledger, rec.Seq))
	ack, err := w.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(w.lastSeq))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return 0, "", fmt.Errorf("%w (%s at seq %d)", ErrFenced, w.ledger, w.seq)
		}
		// The ack may have been lost after the record was stored: what is
		// the ledger's last record now?
		if serr := w.sync(context.WithoutCancel(ctx)); serr != nil {
			return 0, "", fmt.Errorf("ledger %s: append: %w (and reading back: %v)", w.ledger, err, serr)
		}
		if w.seq == rec.Seq {
			last, gerr := w.stream.GetMsg(context.WithoutCancel(ctx), w.lastSeq)
			if gerr == nil && bytes.Equal(last.Data, b) {
				return w.seq, w.head, nil // it was stored: the ack was lost
			}
			return 0, "", fmt.Errorf("%w (%s at seq %d)", ErrFenced, w.ledger, rec.Seq)
		}
		return 0, "", fmt.Errorf("ledger %s: append: %w", w.ledger, err)
	}
	w.seq, w.lastSeq, w.head = rec.Seq, ack.Sequence, EntryHash(b)
	return w.seq, w.head, nil
}

// Read returns a ledger's stored records in order.
func Read(ctx context.Context, js jetstream.JetStream, ledger string) ([][]byte, error) {
	s, err := js.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("ledger: stream %s: %w", Stream, err)
	}
	var out [][]byte
	var after uint64
	for {
		m, err := s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(Subject(ledger)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", ledger, err)
		}
		out = append(out, m.Data)
		after = m.Sequence
	}
}
