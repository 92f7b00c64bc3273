package agentrun

import (
	"context"
	"encoding/json"
	"sync"

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

	once sync.Once
	acks *asyncAcks
}

func (e *Events) sent() *asyncAcks {
	e.once.Do(func() { e.acks = &asyncAcks{js: e.JS} })
	return e.acks
}

// Emit implements agent.Sink.
func (e *Events) Emit(ev agent.Event) {
	if e.Hold != nil && e.Hold(ev) {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		e.sent().fail("event "+ev.Type, err)
		return
	}
	m := nats.NewMsg(EventSubject(ev.RunID, ev.Type))
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, ev.ID)
	e.sent().publish(m, "event on "+m.Subject)
}

// Flush waits for every event to be stored and returns the failures.
func (e *Events) Flush(ctx context.Context) []string { return e.sent().flush(ctx) }

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
