package agent

import (
	"sync"
	"time"
)

// Event types, as they appear on the bus and in JSONL files.
const (
	EventRunStart          = "run.start"
	EventRunEnd            = "run.end"
	EventIterationStart    = "iteration.start"
	EventIterationEnd      = "iteration.end"
	EventLLMRequest        = "llm.request"
	EventLLMResponse       = "llm.response"
	EventCostRecorded      = "cost.recorded"
	EventCostWarning       = "cost.warning"
	EventPlanCreated       = "plan.created"
	EventEvaluationCreated = "evaluation.created"
	EventContractViolation = "contract.violation"
	EventToolCall          = "tool.call"
	EventToolResult        = "tool.result"
	EventSkillLoaded       = "skill.loaded"
	EventMemoryCompaction  = "memory.compaction"
	EventBudgetExceeded    = "budget.exceeded"
	EventRunCancelled      = "run.cancelled"
	EventError             = "error"
	EventApprovalRequested = "approval.requested"
	EventApprovalDecided   = "approval.decided"
	EventGuardrailRisk     = "guardrail.risk"
	EventGuardrailFinding  = "guardrail.finding"
	EventGuardrailBlocked  = "guardrail.blocked"
	EventCostCircuitOpen   = "cost.circuit_open"
)

// Phases of an iteration.
const (
	PhaseAnalyze    = "analyze"
	PhaseAct        = "act"
	PhaseExecute    = "execute"
	PhaseObserve    = "observe"
	PhaseCompaction = "compaction"
)

// Event is one thing that happened in a run.
type Event struct {
	ID        string         `json:"id"`
	TS        time.Time      `json:"ts"`
	Type      string         `json:"type"`
	RunID     string         `json:"run_id"`
	SessionID string         `json:"session_id"`
	Agent     string         `json:"agent"`
	Iteration int            `json:"iteration"`
	Phase     string         `json:"phase,omitempty"`
	Data      map[string]any `json:"data"`
}

// Sink receives a run's events, synchronously and in order. A sink must not
// block for long and must not fail the run: it reports its own trouble.
type Sink interface {
	Emit(Event)
}

// SinkFunc adapts a function.
type SinkFunc func(Event)

// Emit implements Sink.
func (f SinkFunc) Emit(e Event) { f(e) }

// Recorder keeps every event: for tests, `troy agent show` and the CLI's
// JSON output.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Emit implements Sink.
func (r *Recorder) Emit(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events are the recorded events in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Types lists the recorded event types in order.
func (r *Recorder) Types() []string {
	evs := r.Events()
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// Of returns the recorded events of one type.
func (r *Recorder) Of(typ string) []Event {
	var out []Event
	for _, e := range r.Events() {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}
