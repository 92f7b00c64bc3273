package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrBehind is returned by Batcher.Add when records arrive faster than
// the ledger takes them and its queue is full: the caller must not act as
// if the record were kept.
var ErrBehind = errors.New("ledger: the writer is behind (its queue is full)")

// BatcherOptions tune a Batcher; zero fields take the defaults.
type BatcherOptions struct {
	Queue   int           // records waiting at most (10,000)
	Timeout time.Duration // one batch's write, before it is retried (5 s)
}

// Batcher appends records for callers that must not wait for the ledger
// one by one (the guard answers in microseconds). One goroutine writes:
// it takes what has queued, up to MaxBatch, as one atomic batch, then the
// next — while a batch is on its way, the next one gathers (group commit),
// so records wait one round trip at most when the ledger keeps up. A batch
// that fails is retried, in order, until it is stored; meanwhile the queue
// fills and Add reports ErrBehind. Fenced by another writer, the batcher
// stops: every record after is refused.
type Batcher struct {
	w     *Writer
	opts  BatcherOptions
	queue chan queued
	done  chan struct{}

	mu     sync.Mutex
	closed bool
	err    error // the last write error, nil once a write succeeds
	fenced error // set for good once another writer took the ledger

	Appended atomic.Int64 // records stored
	Failures atomic.Int64 // batches that failed (and were retried)
}

type queued struct {
	e      Entry
	stored chan error // AddWait's: told when the record is stored, or not
}

// OpenBatcher opens the ledger's writer and starts writing.
func OpenBatcher(ctx context.Context, js jetstream.JetStream, ledger, writer string, opts BatcherOptions) (*Batcher, error) {
	w, err := Open(ctx, js, ledger, writer)
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 10000
	}
	b := &Batcher{w: w, opts: opts, queue: make(chan queued, opts.Queue), done: make(chan struct{})}
	go b.run()
	return b, nil
}

// Ledger is the id of the ledger written ("" for a nil Batcher: a
// service with its ledger off).
func (b *Batcher) Ledger() string {
	if b == nil {
		return ""
	}
	return b.w.ledger
}

// Shutdown is Close for a service stopping: it gives the queued records
// 10 s however ctx ended, and does nothing for a nil Batcher.
func (b *Batcher) Shutdown(ctx context.Context) error {
	if b == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.Close(cctx); err != nil {
		return fmt.Errorf("decision ledger %s: %w", b.w.ledger, err)
	}
	return nil
}

// Add queues a record.
func (b *Batcher) Add(kind string, data map[string]any) error {
	return b.AddEntry(Entry{Kind: kind, Data: data})
}

// AddEntry queues a record whose data may be built when it is written.
func (b *Batcher) AddEntry(e Entry) error { return b.enqueue(queued{e: e}) }

// AddWait queues a record and waits until it is stored (nil) or cannot be
// (an error): for callers that must not go on before it is kept.
func (b *Batcher) AddWait(ctx context.Context, e Entry) error {
	q := queued{e: e, stored: make(chan error, 1)}
	if err := b.enqueue(q); err != nil {
		return err
	}
	select {
	case err := <-q.stored:
		return err
	case <-ctx.Done():
		return fmt.Errorf("ledger %s: the record is not stored yet: %w", b.w.ledger, ctx.Err())
	}
}

func (b *Batcher) enqueue(q queued) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.fenced != nil:
		return b.fenced
	case b.closed:
		return fmt.Errorf("ledger %s: closed", b.w.ledger)
	}
	select {
	case b.queue <- q:
		return nil
	default:
		if b.err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBehind, b.w.ledger, b.err)
		}
		return fmt.Errorf("%w: %s", ErrBehind, b.w.ledger)
	}
}

// Err is the last write error, nil when the last write succeeded.
func (b *Batcher) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Close stops taking records and writes what is queued, waiting until ctx
// ends; records still unwritten then are counted in the error.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
		return b.Err()
	case <-ctx.Done():
		return fmt.Errorf("ledger %s: records not written: %w", b.w.ledger, ctx.Err())
	}
}

func (b *Batcher) run() {
	defer close(b.done)
	for {
		first, ok := <-b.queue
		if !ok {
			return
		}
		batch := []queued{first}
	gather:
		for len(batch) < MaxBatch {
			select {
			case q, ok := <-b.queue:
				if !ok {
					break gather
				}
				batch = append(batch, q)
			default:
				break gather
			}
		}
		if err := b.write(batch); err != nil {
			// given up (closing, or fenced): what is left is not written
			left := batch
		drain:
			for {
				select {
				case q, ok := <-b.queue:
					if !ok {
						break drain
					}
					left = append(left, q)
				default:
					break drain
				}
			}
			for _, q := range left {
				if q.stored != nil {
					q.stored <- err
				}
			}
			b.mu.Lock()
			b.err = fmt.Errorf("%d records not written: %w", len(left), err)
			b.mu.Unlock()
			return
		}
	}
}

// write stores one batch, retrying on failure; an error when it gave up:
// fenced, or closing and still failing after three attempts.
func (b *Batcher) write(batch []queued) error {
	entries := make([]Entry, len(batch))
	for i, q := range batch {
		entries[i] = q.e
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
		_, _, err := b.w.AppendBatch(ctx, entries) // the same slice again: a retry of a batch in doubt
		cancel()
		b.mu.Lock()
		b.err = err
		closing := b.closed
		if errors.Is(err, ErrFenced) {
			b.fenced = fmt.Errorf("ledger %s: another writer appended to it, so this one stopped: %w", b.w.ledger, err)
		}
		b.mu.Unlock()
		if err == nil {
			b.Appended.Add(int64(len(batch)))
			for _, q := range batch {
				if q.stored != nil {
					q.stored <- nil
				}
			}
			return nil
		}
		b.Failures.Add(1)
		if errors.Is(err, ErrFenced) || (closing && attempt >= 2) {
			return err
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
	}
}
