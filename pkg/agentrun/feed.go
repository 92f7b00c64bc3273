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

	mu      sync.Mutex
	lastAct string
	lastRun string // the execute step, parent of the observation
	calls   map[string]toolCall
	errs    []string
	futures []pending
}

type toolCall struct {
	args      any
	rationale string
	stepID    string
	actStep   string
}

// Emit implements agent.Sink.
func (f *Feed) Emit(ev agent.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]toolCall{}
	}
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
	case agent.EventPlanCreated:
		na, _ := ev.Data["next_action"].(map[string]any)
		f.step(ctx, ev, &trace.Step{Type: trace.TypeLLMCall, Name: "analyze", Output: ev.Data, Description: str(na["rationale"])})
	case agent.EventContractViolation:
		f.step(ctx, ev, &trace.Step{Type: trace.TypeDecision, Name: "contract_violation", Output: ev.Data,
			Description: fmt.Sprintf("the %s-phase output broke its contract", ev.Phase)})
	case agent.EventToolCall:
		id := stepID(ev, "act")
		callID := str(ev.Data["call_id"])
		f.calls[callID] = toolCall{args: ev.Data["arguments"], rationale: str(ev.Data["rationale"]), stepID: str(ev.Data["step_id"]), actStep: id}
		f.step(ctx, ev, &trace.Step{StepID: id, Type: trace.TypeLLMCall, Name: "act", Description: str(ev.Data["rationale"]),
			Output: map[string]any{"tool": ev.Data["tool"], "arguments": ev.Data["arguments"]}})
	case agent.EventToolResult:
		c := f.calls[str(ev.Data["call_id"])]
		delete(f.calls, str(ev.Data["call_id"]))
		id := stepID(ev, "execute")
		f.lastRun = id
		f.step(ctx, ev, &trace.Step{StepID: id, Type: trace.TypeToolCall, Name: str(ev.Data["tool"]), Input: c.args,
			Output: ev.Data["preview"], Description: c.rationale, ParentStepID: c.actStep,
			Metadata: map[string]any{"ok": ev.Data["ok"], "error_code": ev.Data["error_code"], "duration_ms": ev.Data["duration_ms"],
				"call_id": ev.Data["call_id"], "plan_step_id": c.stepID}})
	case agent.EventEvaluationCreated:
		f.step(ctx, ev, &trace.Step{Type: trace.TypeObservation, Name: "observe", Output: ev.Data, ParentStepID: f.lastRun,
			Description: str(ev.Data["evidence"])})
	case agent.EventRunEnd:
		if f.Hold != nil && f.Hold(ev) {
			return
		}
		f.step(ctx, ev, &trace.Step{Type: trace.TypeDecision, Name: "run_end", Output: ev.Data,
			Description: fmt.Sprintf("the run ended %v", ev.Data["status"])})
		f.publish(ev, f.Sender.EndMsg(ev.RunID, nil))
	}
}

func (f *Feed) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return 5 * time.Second
}

// stepID is unique even when a run's iteration is replayed after a crash.
func stepID(ev agent.Event, name string) string {
	return fmt.Sprintf("%d-%s-%s", ev.Iteration, name, ev.ID[:6])
}

func (f *Feed) step(ctx context.Context, ev agent.Event, s *trace.Step) {
	if s.StepID == "" {
		s.StepID = stepID(ev, s.Name)
	}
	s.Timestamp = ev.TS.Format(time.RFC3339Nano)
	if s.Metadata == nil {
		s.Metadata = map[string]any{}
	}
	s.Metadata["iteration"] = ev.Iteration
	if ev.Phase != "" {
		s.Metadata["phase"] = ev.Phase
	}
	body, err := json.Marshal([]*trace.Step{s})
	if err != nil {
		f.check(ev, err)
		return
	}
	f.publish(ev, f.Sender.StepsMsg(ev.RunID, body, ev.Agent, f.PolicyHash))
}

func (f *Feed) publish(ev agent.Event, m *nats.Msg) {
	fut, err := f.JS.PublishMsgAsync(m)
	if err != nil {
		f.check(ev, err)
		return
	}
	f.futures = append(f.futures, pending{fut, ev.Type})
	if len(f.futures) >= 256 { // bounded on long runs
		f.settle(context.Background())
	}
}

type pending struct {
	fut jetstream.PubAckFuture
	typ string
}

// Flush waits for the steps to be stored.
func (f *Feed) Flush(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle(ctx)
}

// settle waits for the pending publishes; f.mu is held.
func (f *Feed) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // for all of them together
	defer cancel()
	for _, p := range f.futures {
		select {
		case <-p.fut.Ok():
		case err := <-p.fut.Err():
			f.errs = append(f.errs, fmt.Sprintf("audit step for %s: %v", p.typ, err))
		case <-ctx.Done():
			f.errs = append(f.errs, fmt.Sprintf("audit step for %s: not stored: %v", p.typ, ctx.Err()))
		}
	}
	f.futures = nil
}

func (f *Feed) check(ev agent.Event, err error) {
	if err != nil {
		f.errs = append(f.errs, fmt.Sprintf("audit step for %s: %v", ev.Type, err))
	}
}

// Errors are the steps that did not reach the pipeline.
func (f *Feed) Errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

var _ stream.Starts = jetstream.KeyValue(nil)
