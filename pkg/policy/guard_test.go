package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGuardOnlyFromLeftmostConjunct(t *testing.T) {
	none := stepGuard{stepIndex: -1}
	cases := []struct {
		cond string
		want stepGuard
	}{
		{"step.type == 'tool_call' and get(step, 'x') == 1", stepGuard{stepType: "tool_call", stepIndex: -1}},
		{"step.type == 'tool_call' and get(step, 'metadata.z') == 'ext' and any_prev({true}) and get(step, 'k') == 'v'",
			stepGuard{stepType: "tool_call", stepIndex: -1, fields: []*fieldTest{{base: "step", path: "metadata.z", want: "ext"}}}},
		{"'llm_call' == step.type", stepGuard{stepType: "llm_call", stepIndex: -1, complete: true}},
		{"step_index == 0 and len(prev_steps) == 0 and step.type == 'tool_call'", stepGuard{stepIndex: 0}},
		{"get(step, 'metadata.c') == 'pii' and true", stepGuard{stepIndex: -1, fields: []*fieldTest{{base: "step", path: "metadata.c", want: "pii"}}, complete: true}},
		{"true == get(step, 'metadata.r', false)", stepGuard{stepIndex: -1, fields: []*fieldTest{{base: "step", path: "metadata.r", def: false, want: true}}, complete: true}},
		{"get(agent, 'metadata.p') != 'admin' and get(step, 'metadata.p') == 'admin'", stepGuard{stepIndex: -1,
			wholes: []*fieldTest{{base: "agent", path: "metadata.p", want: "admin", negate: true}},
			fields: []*fieldTest{{base: "step", path: "metadata.p", want: "admin"}}, complete: true}},
		{"get(trace, 'metadata.env') == 'prod'", stepGuard{stepIndex: -1, wholes: []*fieldTest{{base: "trace", path: "metadata.env", want: "prod"}}, complete: true}},
		{"get(step, 'x') == nil", stepGuard{stepIndex: -1, fields: []*fieldTest{{base: "step", path: "x", want: nil}}, complete: true}},
		{"get(step, 'metadata.c') != 'pii'", none},                 // a step-level != is not a guard
		{"get(step, 'x') == 1 and step.type == 'tool_call'", none}, // numbers are not compared
		{"get(steps, '0.type') == 'y'", none},
		{"step.input.id > 0 and step.type == 'tool_call'", none}, // not leftmost: may error first
		{"step.type == 'tool_call' or step_index == 0", none},
		{"not (step.type == 'tool_call')", none},
		{"step?.type == 'tool_call'", none},
	}
	for _, c := range cases {
		prog, _, prob := compileCondition(Rule{RuleID: "r", Condition: c.cond})
		require.Nil(t, prob, c.cond)
		assert.Equal(t, c.want, guardOf(prog.Node()), c.cond)
	}
}

// Guards change speed, never results: each condition gives the same
// violations and rule errors as the same condition behind
// `step_index >= 0 and (…)`, which no guard recognises (`true and …` is
// folded away by expr's optimizer, guard and all).
func TestGuardsDoNotChangeResults(t *testing.T) {
	tr := testTrace(t)
	conds := []string{
		"step.type == 'tool_call' and step.input.id > 0",
		"step_index == 2 and true",
		"step.type == 'decision'",
		"get(step, 'metadata.data_classification') == 'pii' and any_next({.type == 'tool_call'})",
		"get(step, 'metadata.requires_approval') == true and get(step, 'metadata.approval_token') == nil",
		"get(step, 'metadata.requires_approval', false) == false",
		"get(step, 'metadata.missing', 'dflt') == 'dflt' and step_index < 2",
		"get(agent, 'metadata.permission_level') != 'admin' and get(step, 'metadata.permission_level') == 'admin'",
		"get(agent, 'metadata.permission_level') == 'admin'",
		"get(trace, 'metadata.env') == 'prod' and step.input.id + 1 > 0",
		"get(step, 'input') == 'x'",
		"step.type == 'tool_call' and get(step, 'metadata.network_zone') == 'external' and any_prev({get(#, 'metadata.data_classification') == 'pii'})",
		"step.type == 'tool_call' and get(step, 'metadata.network_zone') == 'internal' and step.input.id + 1 > 0",
		"get(step, 'metadata.approval_token') == nil and step.type == 'tool_call'",
		"get(step, 'metadata.requires_approval') == nil",
		"matches(get(step, 'input', {}), 'ignore (all )?previous instructions')",
		"step.type == 'tool_call' and matches(get(step, 'input.query', ''), 'SELECT|DROP')",
		"matches(get(step, 'input.missing'), '^$')",
		"matches(get(step, 'input.id'), '4')",
		"matches(get(step, 'output', {}), 'example') and step_index == 0",
	}
	for _, c := range conds {
		guarded := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: c}}}
		plain := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: "step_index >= 0 and (" + c + ")"}}}
		require.Empty(t, guarded.normalize())
		require.Empty(t, plain.normalize())
		ge, err := Compile(guarded)
		require.NoError(t, err)
		pe, err := Compile(plain)
		require.NoError(t, err)
		assert.NotEqual(t, stepGuard{stepIndex: -1}, ge.rules[0].guard, c)
		require.Equal(t, stepGuard{stepIndex: -1}, pe.rules[0].guard, "the plain version has no guard: %s", c)
		want, got := pe.Evaluate(tr), ge.Evaluate(tr)
		assert.Equal(t, want.Violations, got.Violations, c)
		require.Equal(t, len(want.RuleErrors), len(got.RuleErrors), c)
		for i := range want.RuleErrors {
			assert.Equal(t, want.RuleErrors[i].StepID, got.RuleErrors[i].StepID, c)
		}
	}
}

// A guard that is the whole condition decides it without running it; one
// with a regex test, or with anything after its tests, does not.
func TestCompleteGuards(t *testing.T) {
	for cond, complete := range map[string]bool{
		"step.type == 'tool_call' and get(step, 'metadata.category') == 'communication'":                           true,
		"get(step, 'metadata.requires_approval') == true and get(step, 'metadata.approval_token') == nil":          true,
		"get(agent, 'metadata.permission_level') != 'admin' and get(step, 'metadata.permission_level') == 'admin'": true,
		"step.type == 'tool_call' and matches(get(step, 'input.query', ''), 'SELECT')":                             false,
		"get(step, 'metadata.c') == 'pii' and any_next({.type == 'tool_call'})":                                    false,
	} {
		prog, _, prob := compileCondition(Rule{RuleID: "r", Condition: cond})
		require.Nil(t, prob, cond)
		assert.Equal(t, complete, guardOf(prog.Node()).complete, cond)
	}
}
