package agent

import (
	"fmt"
	"time"

	"github.com/troy-audit/troy/pkg/trace"
)

// Steps turns a run's events into the steps of its trace: each ANALYZE,
// ACT, EXECUTE and OBSERVE (and contract violations, the end) is a step.
// The audit feed streams them; the live policy guard judges a call with
// the steps before it. One Steps per run.
type Steps struct {
	calls   map[string]stepCall
	lastRun string
}

type stepCall struct {
	args      any
	rationale string
	stepID    string
	actStep   string
}

// StepID is unique even when an iteration is replayed after a crash.
func StepID(ev Event, name string) string {
	id := ev.ID
	if len(id) > 6 {
		id = id[:6]
	}
	return fmt.Sprintf("%d-%s-%s", ev.Iteration, name, id)
}

// Step is the event's step, or nil for events that are not steps.
func (b *Steps) Step(ev Event) *trace.Step {
	if b.calls == nil {
		b.calls = map[string]stepCall{}
	}
	switch ev.Type {
	case EventPlanCreated, EventContractViolation, EventToolCall, EventToolResult, EventEvaluationCreated, EventRunEnd:
	default:
		return nil // most events are not steps: no need to reshape them
	}
	d := PlainData(ev.Data)
	var s *trace.Step
	switch ev.Type {
	case EventPlanCreated:
		na, _ := d["next_action"].(map[string]any)
		s = &trace.Step{Type: trace.TypeLLMCall, Name: "analyze", Output: d, Description: str(na["rationale"])}
	case EventContractViolation:
		s = &trace.Step{Type: trace.TypeDecision, Name: "contract_violation", Output: d,
			Description: fmt.Sprintf("the %s-phase output broke its contract", ev.Phase)}
	case EventToolCall:
		id := StepID(ev, "act")
		b.calls[str(d["call_id"])] = stepCall{args: d["arguments"], rationale: str(d["rationale"]), stepID: str(d["step_id"]), actStep: id}
		s = &trace.Step{StepID: id, Type: trace.TypeLLMCall, Name: "act", Description: str(d["rationale"]),
			Output: map[string]any{"tool": d["tool"], "arguments": d["arguments"]}}
	case EventToolResult:
		c := b.calls[str(d["call_id"])]
		delete(b.calls, str(d["call_id"]))
		id := StepID(ev, "execute")
		b.lastRun = id
		meta := map[string]any{"ok": d["ok"], "error_code": d["error_code"], "duration_ms": d["duration_ms"],
			"call_id": d["call_id"], "plan_step_id": c.stepID}
		if w, ok := d["withheld"]; ok {
			meta["withheld"] = w
		}
		s = &trace.Step{StepID: id, Type: trace.TypeToolCall, Name: str(d["tool"]), Input: c.args, Output: d["preview"],
			Description: c.rationale, ParentStepID: c.actStep, Metadata: meta}
	case EventEvaluationCreated:
		s = &trace.Step{Type: trace.TypeObservation, Name: "observe", Output: d, ParentStepID: b.lastRun, Description: str(d["evidence"])}
	default: // EventRunEnd
		s = &trace.Step{Type: trace.TypeDecision, Name: "run_end", Output: d, Description: fmt.Sprintf("the run ended %v", d["status"])}
	}
	if s.StepID == "" {
		s.StepID = StepID(ev, s.Name)
	}
	s.Timestamp = ev.TS.Format(time.RFC3339Nano)
	if s.Metadata == nil {
		s.Metadata = map[string]any{}
	}
	s.Metadata["iteration"] = ev.Iteration
	if ev.Phase != "" {
		s.Metadata["phase"] = ev.Phase
	}
	return s
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
