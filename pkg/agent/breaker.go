package agent

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/troy-audit/troy/pkg/llm"
)

// Breaker stops a run that is spending too much or going nowhere: a
// dollar ceiling (warned at a ratio, checked before a call whose input
// alone would cross it and after every call), the same call repeated, and
// iterations that repeat their step without completing a new one.
type Breaker struct {
	MaxUSD                float64 // 0: no ceiling
	WarnAtRatio           float64 // 0: 0.75
	MaxIdenticalToolCalls int     // 0: 4 (terminal tools exempt)
	MaxStalledIterations  int     // 0: 4
	// InputPricePerToken estimates a call's input cost before it is made
	// (USD per token, the model's input price; 0: no estimate, checked
	// after the call only).
	InputPricePerToken float64
}

func (b Breaker) withDefaults() Breaker {
	if b.WarnAtRatio <= 0 || b.WarnAtRatio >= 1 {
		b.WarnAtRatio = 0.75
	}
	if b.MaxIdenticalToolCalls <= 0 {
		b.MaxIdenticalToolCalls = 4
	}
	if b.MaxStalledIterations <= 0 {
		b.MaxStalledIterations = 4
	}
	return b
}

// BreakerState is kept with the session: a resumed run goes on with it, a
// new run starts afresh.
type BreakerState struct {
	RunID       string         `json:"run_id"`
	Calls       map[string]int `json:"calls"`
	Stalled     int            `json:"stalled"`
	LastStep    string         `json:"last_step"` // step id and tool of the last iteration
	Completed   []string       `json:"completed"`
	Warned      bool           `json:"warned"`
	UnpricedFor []string       `json:"unpriced_for,omitempty"`
}

func (s *BreakerState) reset(runID string) {
	if s.RunID == runID && s.Calls != nil {
		return
	}
	*s = BreakerState{RunID: runID, Calls: map[string]int{}}
}

// fingerprint is a call's identity: the tool and its arguments with keys
// sorted, so their order does not matter.
func fingerprint(tool string, args json.RawMessage) string {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return tool + " " + string(args)
	}
	if m, ok := v.(map[string]any); ok {
		if p, ok := m["path"].(string); ok { // ./f.txt is f.txt
			m["path"] = path.Clean(strings.ReplaceAll(p, `\`, "/"))
		}
	}
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	return tool + " " + string(b)
}

// usdEpsilon absorbs float rounding in dollar sums (a millionth of a cent).
const usdEpsilon = 1e-8

// tripped ends the run the way the breaker says.
func (r *run) tripped(reason, detail string, status Status) error {
	st := r.st.Breaker
	maxRepeat := 0
	for _, n := range st.Calls {
		maxRepeat = max(maxRepeat, n)
	}
	r.emit(EventCostCircuitOpen, "", map[string]any{"reason": reason, "detail": detail, "stalled_iterations": st.Stalled,
		"distinct_calls": len(st.Calls), "max_repeat": maxRepeat, "spent_usd": round6(r.st.CostUSD)})
	return &stop{status: status, answer: fmt.Sprintf("Terminated by the circuit breaker (%s): %s. No further work was attempted.", reason, detail)}
}

// beforeCall refuses a model call that would cross the dollar ceiling on
// its input alone.
func (r *run) beforeCall(req llm.Request) error {
	b := r.a.cfg.Breaker.withDefaults()
	if b.MaxUSD <= 0 || b.InputPricePerToken <= 0 {
		return nil
	}
	est := float64(estimate(req.System, req.Turns)) * b.InputPricePerToken
	if r.st.CostUSD+est >= b.MaxUSD-usdEpsilon {
		return r.tripped("cost_ceiling", fmt.Sprintf("the next call (about $%.4f of input) would take the run past its $%.4f ceiling at $%.4f spent",
			est, b.MaxUSD, r.st.CostUSD), Exhausted)
	}
	return nil
}

// afterCall checks the spend once a call's cost is known.
func (r *run) afterCall(model string, priced bool) error {
	b := r.a.cfg.Breaker.withDefaults()
	st := &r.st.Breaker
	if !priced && !slices.Contains(st.UnpricedFor, model) {
		st.UnpricedFor = append(st.UnpricedFor, model)
		r.emit(EventCostWarning, "", map[string]any{"message": fmt.Sprintf("No rate card for '%s': its spend is counted as $0.00, so the cost ceiling cannot protect this run (add its prices under cost.prices)", model)})
	}
	if b.MaxUSD <= 0 {
		return nil
	}
	if !st.Warned && r.st.CostUSD >= b.MaxUSD*b.WarnAtRatio {
		st.Warned = true
		r.emit(EventCostWarning, "", map[string]any{"message": fmt.Sprintf("The run has spent $%.4f, %.0f%% of its $%.4f ceiling", r.st.CostUSD, 100*r.st.CostUSD/b.MaxUSD, b.MaxUSD)})
	}
	if r.st.CostUSD >= b.MaxUSD-usdEpsilon {
		return r.tripped("cost_ceiling", fmt.Sprintf("spent $%.4f of a $%.4f ceiling", r.st.CostUSD, b.MaxUSD), Exhausted)
	}
	return nil
}

// beforeTool refuses the call that repeats an identical one too often: the
// tripping call never runs.
func (r *run) beforeTool(tool string, args json.RawMessage) error {
	if spec, ok := r.a.cfg.Tools.Spec(tool); ok && spec.Terminal {
		return nil
	}
	b := r.a.cfg.Breaker.withDefaults()
	st := &r.st.Breaker
	fp := fingerprint(tool, args)
	if st.Calls[fp]+1 >= b.MaxIdenticalToolCalls {
		st.Calls[fp]++
		return r.tripped("repeated_tool_call", fmt.Sprintf("`%s` was called %d times with the same arguments", tool, st.Calls[fp]), Blocked)
	}
	st.Calls[fp]++
	return nil
}

// afterObserve counts iterations that repeat the last one's step and tool
// without completing a new step.
func (r *run) afterObserve(plan *Plan, eval *Evaluation) error {
	b := r.a.cfg.Breaker.withDefaults()
	st := &r.st.Breaker
	key := plan.NextAction.StepID + "\x00" + plan.NextAction.Tool
	progress := false
	for _, id := range eval.CompletedStepIDs {
		if !slices.Contains(st.Completed, id) {
			st.Completed = append(st.Completed, id)
			progress = true
		}
	}
	sort.Strings(st.Completed)
	if key == st.LastStep && !progress {
		st.Stalled++
	} else {
		st.Stalled = 0
	}
	st.LastStep = key
	if st.Stalled >= b.MaxStalledIterations {
		return r.tripped("stalled", fmt.Sprintf("%d iterations repeated step %s with %s and completed nothing new",
			st.Stalled, plan.NextAction.StepID, plan.NextAction.Tool), Blocked)
	}
	return nil
}
