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
	Interval time.Duration // flush at least this often (50 ms)
	Queue    int           // records waiting at most (10,000)
	Timeout  time.Duration // one batch's write, before it is retried (5 s)
}

// Batcher appends records for callers that must not wait for the ledger
// (the guard answers in microseconds): Add queues a record, and one
// goroutine writes what has queued as atomic batches, every Interval or
// MaxBatch records. A failed batch is retried, in order, until it is
// stored or the batcher is closed; meanwhile the queue fills and Add
// reports ErrBehind.
type Batcher struct {
	w     *Writer
	opts  BatcherOptions
	queue chan Entry
	done  chan struct{}

	mu     sync.Mutex
	closed bool
	err    error // the last write error, nil once a write succeeds

	Appended atomic.Int64 // records stored
	Failures atomic.Int64 // batches that failed (and were retried)
}

// OpenBatcher opens the ledger's writer and starts writing.
func OpenBatcher(ctx context.Context, js jetstream.JetStream, ledger, writer string, opts BatcherOptions) (*Batcher, error) {
	w, err := Open(ctx, js, ledger, writer)
	if err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = 50 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 10000
	}
	b := &Batcher{w: w, opts: opts, queue: make(chan Entry, opts.Queue), done: make(chan struct{})}
	go b.run()
	return b, nil
}

// Ledger is the id of the ledger written.
func (b *Batcher) Ledger() string { return b.w.ledger }

// Add queues a record.
func (b *Batcher) Add(kind string, data map[string]any) error {
	return b.AddEntry(Entry{Kind: kind, Data: data})
}

// AddEntry queues a record whose data may be built when it is written.
func (b *Batcher) AddEntry(e Entry) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("ledger %s: closed", b.w.ledger)
	}
	select {
	case b.queue <- e:
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
		return fmt.Errorf("ledger %s: %d records not written: %w", b.w.ledger, len(b.queue), ctx.Err())
	}
}

func (b *Batcher) run() {
	defer close(b.done)
	tick := time.NewTicker(b.opts.Interval)
	defer tick.Stop()
	var pending []Entry
	for {
		open := true
		select {
		case e, ok := <-b.queue:
			if ok {
				pending = append(pending, e)
			}
			open = ok
			if ok && len(pending) < MaxBatch {
				continue
			}
		case <-tick.C:
		}
		for len(pending) > 0 {
			n := min(len(pending), MaxBatch)
			if !b.write(pending[:n]) {
				b.mu.Lock()
				b.err = fmt.Errorf("%d records not written: %w", len(pending)+len(b.queue), b.err)
				b.mu.Unlock()
				return
			}
			pending = pending[n:]
		}
		if !open {
			return
		}
	}
}

// write stores one batch, retrying on failure; false when it gave up
// (closing, and still failing after three attempts).
func (b *Batcher) write(batch []Entry) bool {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
		_, _, err := b.w.AppendBatch(ctx, batch)
		cancel()
		b.mu.Lock()
		b.err = err
		closing := b.closed
		b.mu.Unlock()
		if err == nil {
			b.Appended.Add(int64(len(batch)))
			return true
		}
		b.Failures.Add(1)
		if errors.Is(err, ErrFenced) { // another writer took the ledger: go on after its records
			_ = b.w.Resync(context.Background())
		}
		if closing && attempt >= 2 {
			return false
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
	}
}
