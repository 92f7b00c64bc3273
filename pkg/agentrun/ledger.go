package agentrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/ledger"
)

// Decisions writes a run's decisions to its ledger: one record per
// iteration (plan, rationale, tool and a hash of its arguments, guardrail
// and policy verdicts, approvals, evaluation, tokens, spend), one per tool
// call that ran in an iteration cut short (its side effect happened), and
// always a final record with the run's real status.
type Decisions struct {
	JS     jetstream.JetStream
	Writer string // who writes (the runner)
	// Hold, true for the end of a run that goes on under another runner,
	// keeps its run_end record back (the calls that ran are still written).
	Hold func(agent.Event) bool

	mu      sync.Mutex
	w       *ledger.Writer
	it      *iterationNotes
	errs    []string
	timeout time.Duration
}

type iterationNotes struct {
	index      int
	plan       map[string]any
	calls      []map[string]any
	executed   []map[string]any
	guardrails []map[string]any
	approvals  []map[string]any
	violations []map[string]any
	evaluation map[string]any
	tokens     int
	spend      float64
}

// Emit implements agent.Sink.
func (d *Decisions) Emit(ev agent.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data := ev.Data
	switch ev.Type {
	case agent.EventRunStart:
		w, err := ledger.Open(ctx, d.JS, ev.RunID, d.Writer)
		if err != nil {
			d.fail(err)
			return
		}
		d.w = w
	case agent.EventIterationStart:
		d.it = &iterationNotes{index: ev.Iteration}
	case agent.EventPlanCreated:
		if d.it != nil {
			d.it.plan = data
		}
	case agent.EventLLMResponse:
		if d.it != nil {
			d.it.tokens += int(agent.NumberOf(data["input_tokens"]) + agent.NumberOf(data["output_tokens"]))
		}
	case agent.EventCostRecorded:
		if d.it != nil {
			d.it.spend = agent.NumberOf(data["run_usd"])
		}
	case agent.EventContractViolation:
		if d.it != nil {
			d.it.violations = append(d.it.violations, map[string]any{"phase": ev.Phase, "reason": data["reason"]})
		}
	case agent.EventToolCall:
		if d.it != nil {
			d.it.calls = append(d.it.calls, map[string]any{"tool": data["tool"], "call_id": data["call_id"],
				"arguments_sha256": ledger.Digest(data["arguments"]), "rationale": data["rationale"], "step_id": data["step_id"]})
		}
	case agent.EventToolResult:
		if d.it != nil {
			r := map[string]any{"tool": data["tool"], "call_id": data["call_id"], "ok": data["ok"], "error_code": data["error_code"],
				"executed": data["executed"], "withheld": data["withheld"], "duration_ms": data["duration_ms"]}
			d.it.executed = append(d.it.executed, r)
		}
	case agent.EventGuardrailRisk, agent.EventGuardrailBlocked, agent.EventGuardrailFinding:
		if d.it != nil {
			d.it.guardrails = append(d.it.guardrails, map[string]any{"event": ev.Type, "data": data})
		}
	case agent.EventApprovalDecided:
		if d.it != nil {
			d.it.approvals = append(d.it.approvals, map[string]any{"tool": data["tool"], "approved": data["approved"], "by": data["by"],
				"reason": data["reason"], "wait_ms": data["wait_ms"]})
		}
	case agent.EventEvaluationCreated:
		if d.it != nil {
			d.it.evaluation = data
		}
	case agent.EventIterationEnd:
		if d.it != nil {
			d.append(ctx, "iteration", d.it.record(true))
			d.it = nil
		}
	case agent.EventRunEnd:
		if d.it != nil { // an iteration cut short: what ran, ran
			for _, r := range d.it.executed {
				if r["executed"] == true {
					d.append(ctx, "tool_call", map[string]any{"iteration": d.it.index, "call": r, "calls": d.it.calls})
				}
			}
			d.it = nil
		}
		if d.Hold != nil && d.Hold(ev) {
			return
		}
		final := map[string]any{}
		for k, v := range data {
			final[k] = v
		}
		d.append(ctx, "run_end", final)
	}
}

func (n *iterationNotes) record(complete bool) map[string]any {
	return map[string]any{"iteration": n.index, "plan": n.plan, "calls": orEmptyList(n.calls), "results": orEmptyList(n.executed),
		"guardrails": orEmptyList(n.guardrails), "approvals": orEmptyList(n.approvals), "violations": orEmptyList(n.violations),
		"evaluation": n.evaluation, "tokens": n.tokens, "spend_usd": n.spend, "complete": complete}
}

func orEmptyList(l []map[string]any) []map[string]any {
	if l == nil {
		return []map[string]any{}
	}
	return l
}

func (d *Decisions) append(ctx context.Context, kind string, data map[string]any) {
	if d.w == nil {
		return
	}
	data = agent.PlainData(data)
	for attempt := 0; ; attempt++ {
		_, _, err := d.w.Append(ctx, kind, data)
		if err == nil {
			return
		}
		// Retrying the same record is safe: one whose outcome was unknown
		// is sent again byte for byte and stored once.
		if errors.Is(err, ledger.ErrFenced) || attempt == 2 || ctx.Err() != nil {
			d.fail(err)
			return
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

func (d *Decisions) fail(err error) {
	if len(d.errs) < 10 {
		d.errs = append(d.errs, fmt.Sprintf("ledger: %v", err))
	}
}

// Errors are the records that could not be written.
func (d *Decisions) Errors() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.errs...)
}
