package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

func longTrace(t *testing.T, steps int) *trace.Trace {
	t.Helper()
	raw, err := json.Marshal(tracegen.Trace(1, 0, steps))
	require.NoError(t, err)
	tr, err := trace.Parse(raw, trace.DefaultLimits())
	require.NoError(t, err)
	return tr
}

// Hostile or runaway conditions are refused at load, or stopped with a rule
// error: evaluation always ends, quickly, and the rest of the policy runs.
func TestHostileConditionsAreRefusedAtLoad(t *testing.T) {
	cases := map[string]string{
		"cubic loop":     "count(steps, {count(steps, {count(steps, {true}) > 0}) > 0}) > 0",
		"nested any_*":   "any_step({any_next({.type == 'tool_call'})})",
		"deep nesting":   strings.Repeat("!", 20000) + "true",
		"huge AST":       strings.Repeat("step_index == 1 or ", 6000) + "false",
		"huge range":     "any(1..2000000000, {# == 5})",
		"regex repeat":   "matches(step.description, 'a{1000}{1000}')",
		"deep predicate": "any([[[[1]]]], {any(#, {any(#, {any(#, {# == 1})})})})",
		// the shapes of issue 8, which passed lint before
		"cubic via alias":    "let s = steps; all(s, {all(s, {all(s, {true})})})",
		"alias of an alias":  "let s = steps; let u = s[1:]; any(u, {any(s, {true})})",
		"steps inside range": "any(1..100000, {any_step({.type == 'nope'})})",
		"reserved name":      "__meter != nil",
		"reserved tick":      "__tick(nil, true)",
	}
	for name, cond := range cases {
		t.Run(name, func(t *testing.T) {
			p := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "hostile", Condition: cond}}}
			require.Empty(t, p.normalize())
			start := time.Now()
			_, err := Compile(p)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), `rule "hostile"`)
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestRunawayConditionsStopWithARuleError(t *testing.T) {
	tr := longTrace(t, 3000)
	p := &Policy{PolicyID: "p", Rules: []Rule{
		// quadratic: allowed, but bounded by the time budget on a long trace
		{RuleID: "slow", Condition: "any_step({matches(text(#.input), 'x.*y.*z.*never')})"},
		{RuleID: "fine", Condition: "step_index == 2999"},
	}}
	require.Empty(t, p.normalize())
	e, err := CompileWith(p, Options{Budget: 50 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	res := e.Evaluate(tr)
	assert.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, res.Violations, 1, "the well-behaved rule still runs")
	assert.Equal(t, "fine", res.Violations[0].RuleID)
	require.Len(t, res.RuleErrors, 1, "stopped once, then skipped")
	assert.Equal(t, "slow", res.RuleErrors[0].RuleID)
	assert.Contains(t, res.RuleErrors[0].Error, "over the 50ms budget")
}

func TestAllocationsPastExprsBudgetAreRuleErrors(t *testing.T) {
	tr := longTrace(t, 3)
	p := &Policy{PolicyID: "p", Rules: []Rule{
		{RuleID: "alloc", Condition: "len(map(1..99999, {1..20})) > 0"},
		{RuleID: "fine", Condition: "step_index == 2"},
	}}
	require.Empty(t, p.normalize())
	e, err := CompileWith(p, Options{Budget: time.Minute}) // only the memory budget can stop it
	require.NoError(t, err)
	res := e.Evaluate(tr)
	require.Len(t, res.Violations, 1)
	require.Len(t, res.RuleErrors, 1, "stopped once, then skipped")
	assert.Contains(t, res.RuleErrors[0].Error, "over expr's memory budget")
}

func TestConditionsCanDoNoIO(t *testing.T) {
	for _, cond := range []string{
		"readFile('/etc/passwd') != ''",
		"exec('ls') != ''",
		"step.Field('input') != nil", // methods of Go types are not callable
	} {
		p := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "io", Condition: cond}}}
		require.Empty(t, p.normalize())
		_, err := Compile(p)
		assert.ErrorIs(t, err, ErrInvalid, cond)
	}
}

// Conditions that ran unbounded before (issue 8): each now ends with one
// rule error naming the rule and the bound, and the rest of the policy runs.
func TestHostileConditionsAreBoundedFromInside(t *testing.T) {
	tr := longTrace(t, 10_000)
	// Time cases get a short budget; memory cases a long one, so only the
	// memory bound can stop them (text(steps) alone is slow under -race).
	const short, long = 300 * time.Millisecond, time.Minute
	runBounded(t, tr, map[string]boundCase{
		"scan of the whole trace per step": {"matches(text(steps), 'zzzqqq')", "over the 300ms budget", short},
		"quadratic loop":                   {"count(steps, {#.step_id == step.step_id}) < 0", "over the 300ms budget", short},
		"repeat of the trace":              {"len(repeat(text(steps), 4000)) > 0", "repeat would build", long},
		"string reduce":                    {"len(reduce(steps, #acc + text(#), '')) < 0", "memory budget", long},
		"replace blow-up":                  {"len(replace(text(steps), 'a', text(steps))) > 0", "replace would build", long},
		"join of copies":                   {"len(join(map(1..1000, {text(steps)}), '')) > 0", "MiB", long},
		"doubling string":                  {"len(reduce(1..40, #acc + #acc, 'xxxxxxxxxxxxxxxx')) < 0", "memory budget", long},
		"expr's own memory budget":         {"len(map(1..99999, {1..20})) < 0", "memory budget", long},
		// found by probing: a builtin made a rule look flat, untimed
		"toJSON of the trace per step": {"len(toJSON(steps)) < 0", "over the 300ms budget", short},
		"toJSON of copies":             {"len(toJSON([" + strings.Repeat("steps, ", 500) + "steps])) < 0", "toJSON would build", long},
		"text of copies":               {"len(text([" + strings.Repeat("steps, ", 500) + "steps])) < 0", "text would build", long},
		"slow loop body":               {"any(1..1000, {len(toJSON(steps)) < 0})", "over the 300ms budget", short},
	})
}

// boundCase is a condition, the bound that must stop it, and its budget.
type boundCase struct {
	cond, want string
	budget     time.Duration
}

// runBounded evaluates each case's condition beside a well-behaved rule
// (on the last step): the hostile rule is stopped once with the bound in
// its error, and the other still fires.
func runBounded(t *testing.T, tr *trace.Trace, cases map[string]boundCase) {
	t.Helper()
	last := len(tr.Steps) - 1
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := &Policy{PolicyID: "p", Rules: []Rule{
				{RuleID: "hostile", Condition: c.cond},
				{RuleID: "fine", Condition: fmt.Sprintf("step_index == %d", last)},
			}}
			require.Empty(t, p.normalize())
			e, err := CompileWith(p, Options{Budget: c.budget})
			require.NoError(t, err)
			start := time.Now()
			res := e.Evaluate(tr)
			t.Logf("%s: %s", name, time.Since(start))
			require.Len(t, res.Violations, 1, "the well-behaved rule still runs")
			require.Len(t, res.RuleErrors, 1, "stopped once, then skipped: %v", res.RuleErrors)
			assert.Equal(t, "hostile", res.RuleErrors[0].RuleID)
			assert.Contains(t, res.RuleErrors[0].Error, c.want)
		})
	}
}

// A cancelled context stops every costly rule at once.
func TestEvaluationStopsWhenCancelled(t *testing.T) {
	tr := longTrace(t, 2000)
	p := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "slow", Condition: "any_step({matches(text(#), 'x.*y.*never')})"}}}
	require.Empty(t, p.normalize())
	e, err := CompileWith(p, Options{Budget: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res := e.EvaluateContext(ctx, tr)
	require.Len(t, res.RuleErrors, 1)
	assert.Contains(t, res.RuleErrors[0].Error, "cancelled")
}

// The meter's wrapping must not hide type errors until run time (found in
// review): each of these was a load error before it, and is again.
func TestTypeErrorsStayLoadErrors(t *testing.T) {
	for _, cond := range []string{
		"any(steps, {#.name + 'x'})",
		"step.name + 'x'",
		"step.name + 'x' > 5",
		"(step_index + 1) contains 'x'",
		"any(1..3, {any(1..3, {#})})",
		"any(1..3, {upper('x')})",
	} {
		p := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "typo", Condition: cond}}}
		require.Empty(t, p.normalize())
		_, err := Compile(p)
		assert.ErrorIs(t, err, ErrInvalid, cond)
	}
}

// Found in review: operators that scan text, in loops or in rules that read
// another step, and lists built by builtins, escaped the meter.
func TestScanningOperatorsAndBuiltListsAreBounded(t *testing.T) {
	steps := make([]*trace.Step, 300)
	for i := range steps {
		steps[i] = &trace.Step{StepID: fmt.Sprint(i), Type: trace.TypeToolCall, Name: "ls"}
	}
	steps[0].Output = strings.Repeat("a", 1<<20)
	tr := &trace.Trace{TraceID: "big", AgentName: "a", Steps: steps}
	const short, long = 200 * time.Millisecond, time.Minute
	runBounded(t, tr, map[string]boundCase{
		"operator in a loop":      {"any(1..1000, {steps[0].output matches 'a+b'})", "over the 200ms budget", short},
		"operator over the steps": {"any(steps, {steps[0].output matches 'a+b'})", "over the 200ms budget", short},
		"flat rule, other step":   {"steps[0].output matches 'a+b'", "over the 200ms budget", short},
		"lists from builtins":     {"len(map(1..100000, {split(steps[0].output, '')})) < 0", "memory budget", long},
	})
}
