package agentrun

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxPendingAcks bounds the publishes awaiting their ack on long runs.
const maxPendingAcks = 256

// asyncAcks publishes asynchronously and in order, keeps the acks it is
// owed, and reports every publish that failed or was not stored in time.
// A failure never stops the run; it is reported with the result.
type asyncAcks struct {
	js jetstream.JetStream

	mu      sync.Mutex
	pending []pendingAck
	errs    []string
}

type pendingAck struct {
	fut  jetstream.PubAckFuture
	what string
}

func (a *asyncAcks) publish(m *nats.Msg, what string) {
	fut, err := a.js.PublishMsgAsync(m)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.errs = append(a.errs, fmt.Sprintf("%s: %v", what, err))
		return
	}
	a.pending = append(a.pending, pendingAck{fut, what})
	if len(a.pending) >= maxPendingAcks {
		a.settle(context.Background())
	}
}

func (a *asyncAcks) fail(what string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, fmt.Sprintf("%s: %v", what, err))
}

// settle waits for the pending acks, 10 s for all of them; a.mu is held.
func (a *asyncAcks) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, p := range a.pending {
		select {
		case <-p.fut.Ok():
		case err := <-p.fut.Err():
			a.errs = append(a.errs, fmt.Sprintf("%s: %v", p.what, err))
		case <-ctx.Done():
			a.errs = append(a.errs, fmt.Sprintf("%s: not stored: %v", p.what, ctx.Err()))
		}
	}
	a.pending = a.pending[:0]
}

// flush waits for every ack and returns the failures so far.
func (a *asyncAcks) flush(ctx context.Context) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(ctx)
	return append([]string(nil), a.errs...)
}

// failures are the failures so far, without waiting.
func (a *asyncAcks) failures() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}
