package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecideWhen(t *testing.T) {
	cases := map[string]string{
		"step.type == 'tool_call'":                                      DecideNow,
		"any_prev({.type == 'tool_call'}) and step.name == 'x'":         DecideNow,
		"prev_step != nil and len(prev_steps) > 2":                      DecideNow,
		"get(step, 'metadata.c') == 'pii' and any_next({.name == 'x'})": DecideWhenTrue,
		"step.name == 'a' or any_step({.name == 'b'})":                  DecideWhenTrue,
		"not any_next({.name == 'confirm'})":                            DecideAtEnd,
		"step.name == 'x' and !any_next({.name == 'y'})":                DecideAtEnd,
		"all(next_steps, {.type != 'tool_call'})":                       DecideAtEnd,
		"count(next_steps, {true}) == 0":                                DecideAtEnd,
		"next_step == nil":                                              DecideAtEnd,
		"step_index == len(steps) - 1":                                  DecideAtEnd,
		"any_next({any_next({true})})":                                  DecideAtEnd, // refused anyway: nested
		"(any_next({.name == 'x'}) ? 1 : 0) == 1":                       DecideAtEnd,
		"let later = next_steps; len(later) > 0":                        DecideAtEnd,
	}
	for cond, want := range cases {
		prog, _, prob := compileCondition(Rule{RuleID: "r", Condition: cond})
		require.Nil(t, prob, cond)
		assert.Equal(t, want, decideWhen(prog.Node()), cond)
	}
}
