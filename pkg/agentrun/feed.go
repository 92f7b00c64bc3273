package agentrun

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
)

// Feed turns a run's events into the steps of a trace (trace_id = run id)
// and streams them into the audit pipeline as they happen: each ANALYZE,
// ACT, EXECUTE and OBSERVE is a step, so the run's violations are found
// while it runs and its report lands like any other audit. Steps are
// published asynchronously, in order; Flush waits for them.
type Feed struct {
	Sender     stream.Sender // message shapes
	JS         jetstream.JetStream
	Starts     stream.Starts
	PolicyHash string
	// Continuing is set when the run goes on after its runner died: the
	// trace is already open.
	Continuing bool
	Timeout    time.Duration
	// Hold, when it returns true for the run's end, leaves the trace open:
	// the run will go on under another runner.
	Hold func(agent.Event) bool

	mu    sync.Mutex
	steps agent.Steps
	once  sync.Once
	acks  *asyncAcks
}

func (f *Feed) sent() *asyncAcks {
	f.once.Do(func() { f.acks = &asyncAcks{js: f.JS} })
	return f.acks
}

// Emit implements agent.Sink.
func (f *Feed) Emit(ev agent.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout())
	defer cancel()
	switch ev.Type {
	case agent.EventRunStart:
		if f.Continuing {
			return
		}
		body, _ := json.Marshal(stream.Start{AgentName: ev.Agent, Metadata: map[string]any{
			"session_id": ev.SessionID, "goal": ev.Data["goal"], "model": ev.Data["model"], "resumed": ev.Data["resumed"],
			"runtime": "troy agent"}})
		if err := stream.Record(ctx, f.Starts, ev.RunID, body); err != nil {
			f.check(ev, err)
			return
		}
		f.publish(ev, f.Sender.StartMsg(ev.RunID, body, f.PolicyHash))
	case agent.EventRunEnd:
		if f.Hold != nil && f.Hold(ev) {
			return
		}
		f.step(ev, f.steps.Step(ev))
		f.publish(ev, f.Sender.EndMsg(ev.RunID, nil))
	default:
		if s := f.steps.Step(ev); s != nil {
			f.step(ev, s)
		}
	}
}

func (f *Feed) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return 5 * time.Second
}

func (f *Feed) step(ev agent.Event, s *trace.Step) {
	body, err := json.Marshal([]*trace.Step{s})
	if err != nil {
		f.check(ev, err)
		return
	}
	f.publish(ev, f.Sender.StepsMsg(ev.RunID, body, ev.Agent, f.PolicyHash))
}

func (f *Feed) publish(ev agent.Event, m *nats.Msg) {
	f.sent().publish(m, "audit step for "+ev.Type)
}

// Flush waits for the steps to be stored.
func (f *Feed) Flush(ctx context.Context) { f.sent().flush(ctx) }

func (f *Feed) check(ev agent.Event, err error) {
	if err != nil {
		f.sent().fail("audit step for "+ev.Type, err)
	}
}

// Errors are the steps that did not reach the pipeline.
func (f *Feed) Errors() []string { return f.sent().failures() }
