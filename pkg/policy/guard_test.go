package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGuardOnlyFromLeftmostConjunct(t *testing.T) {
	cases := []struct {
		cond string
		want stepGuard
	}{
		{"step.type == 'tool_call' and get(step, 'x') == 1", stepGuard{stepType: "tool_call", stepIndex: -1}},
		{"'llm_call' == step.type", stepGuard{stepType: "llm_call", stepIndex: -1}},
		{"step_index == 0 and len(prev_steps) == 0 and step.type == 'tool_call'", stepGuard{stepIndex: 0}},
		{"get(step, 'x') == 1 and step.type == 'tool_call'", stepGuard{stepIndex: -1}}, // not leftmost: may error first
		{"step.type == 'tool_call' or step_index == 0", stepGuard{stepIndex: -1}},
		{"not (step.type == 'tool_call')", stepGuard{stepIndex: -1}},
		{"step?.type == 'tool_call'", stepGuard{stepIndex: -1}},
	}
	for _, c := range cases {
		prog, _, prob := compileCondition(Rule{RuleID: "r", Condition: c.cond})
		require.Nil(t, prob, c.cond)
		assert.Equal(t, c.want, guardOf(prog.Node()), c.cond)
	}
}

// Guards change speed, never results: the same rules with the guard hidden
// behind a no-op give the same violations and errors.
func TestGuardsDoNotChangeResults(t *testing.T) {
	tr := testTrace(t)
	conds := []string{"step.type == 'tool_call' and step.input.id > 0", "step_index == 2 and true", "step.type == 'decision'"}
	for _, c := range conds {
		guarded := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: c}}}
		plain := &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: "true and (" + c + ")"}}}
		require.Empty(t, guarded.normalize())
		require.Empty(t, plain.normalize())
		ge, err := Compile(guarded)
		require.NoError(t, err)
		pe, err := Compile(plain)
		require.NoError(t, err)
		assert.NotEqual(t, stepGuard{stepIndex: -1}, ge.rules[0].guard, c)
		want, got := pe.Evaluate(tr), ge.Evaluate(tr)
		assert.Equal(t, want.Violations, got.Violations, c)
		require.Equal(t, len(want.RuleErrors), len(got.RuleErrors), c)
		for i := range want.RuleErrors {
			assert.Equal(t, want.RuleErrors[i].StepID, got.RuleErrors[i].StepID, c)
		}
	}
}
