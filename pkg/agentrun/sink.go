package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/agent"
)

// Subjects of agent runs.
const (
	SubjectRun = "troy.agent.run"
	// EventsPrefix + <run_id>.<type>: every event of a run.
	EventsPrefix = "troy.agent.events."
	// ResultPrefix + <run_id>: how the run ended.
	ResultPrefix = "troy.agent.result."
	// CancelPrefix + <run_id> (core NATS): ask the runner to stop the run.
	CancelPrefix = "troy.agent.cancel."
)

// EventSubject is where an event is published.
func EventSubject(runID, typ string) string { return EventsPrefix + runID + "." + typ }

// Events publishes a run's events on troy.agent.events.<run_id>.<type>,
// asynchronously and in order; Flush waits for the server to store them.
// A failed publish never fails the run: it is counted and reported by Flush.
type Events struct {
	JS jetstream.JetStream
	// Hold drops the events it returns true for (a run.end of a run that
	// goes on under another runner).
	Hold func(agent.Event) bool

	mu      sync.Mutex
	futures []jetstream.PubAckFuture
	errs    []string
}

// Emit implements agent.Sink.
func (e *Events) Emit(ev agent.Event) {
	if e.Hold != nil && e.Hold(ev) {
		return
	}
	b, err := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("event %s: %v", ev.Type, err))
		return
	}
	m := nats.NewMsg(EventSubject(ev.RunID, ev.Type))
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, ev.ID)
	f, err := e.JS.PublishMsgAsync(m)
	if err != nil {
		e.errs = append(e.errs, fmt.Sprintf("event %s: %v", ev.Type, err))
		return
	}
	e.futures = append(e.futures, f)
	if len(e.futures) >= 256 { // keep the pending list short on long runs
		e.settle(context.Background(), 10*time.Second)
	}
}

// settle waits for the pending publishes, d for all of them together;
// e.mu is held.
func (e *Events) settle(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, f := range e.futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.errs = append(e.errs, fmt.Sprintf("event on %s: %v", f.Msg().Subject, err))
		case <-ctx.Done():
			e.errs = append(e.errs, fmt.Sprintf("event on %s: not stored: %v", f.Msg().Subject, ctx.Err()))
		}
	}
	e.futures = e.futures[:0]
}

// Flush waits for every event to be stored and returns the failures.
func (e *Events) Flush(ctx context.Context) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle(ctx, 10*time.Second)
	return append([]string(nil), e.errs...)
}

// Sinks fans an event out to several sinks, in order.
type Sinks []agent.Sink

// Emit implements agent.Sink. A sink that panics does not keep the event
// from the others (the run notes the panic).
func (s Sinks) Emit(ev agent.Event) {
	var failed any
	for _, k := range s {
		if k != nil {
			func() {
				defer func() {
					if p := recover(); p != nil && failed == nil {
						failed = p
					}
				}()
				k.Emit(ev)
			}()
		}
	}
	if failed != nil {
		panic(failed) // to the run, which reports it
	}
}
