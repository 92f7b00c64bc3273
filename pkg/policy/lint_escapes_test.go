package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
)

// A regular expression in quotes whose escape is a valid string escape
// (\b: a backspace) would compile and never match: it is refused at load,
// named by rule, line and column, with backquotes suggested; the same
// pattern in backquotes is fine.
func TestQuotedRegexEscapesAreRefused(t *testing.T) {
	for _, c := range []struct{ cond, want string }{
		{`matches(get(step, 'input.query', ''), '\bdrop\b')`, `\b is a backspace, not a word boundary`},
		{`matches(text(step.input), "\bdrop")`, `\b is a backspace`},
		{`matches(text(step.input), '\d+')`, `invalid char escape`},
		{`matches(text(step.input), '\w')`, `invalid char escape`},
		{`matches(text(step.input), '\.env')`, `invalid char escape`},
	} {
		p := &policy.Policy{PolicyID: "p", Rules: []policy.Rule{{RuleID: "r", Severity: "low", Condition: c.cond}}}
		_, err := policy.Compile(p)
		require.Error(t, err, c.cond)
		assert.Contains(t, err.Error(), c.want, c.cond)
		assert.Contains(t, err.Error(), "backquotes", c.cond)
		assert.Contains(t, err.Error(), `rule "r"`, c.cond)
	}
	ok := &policy.Policy{PolicyID: "p", Rules: []policy.Rule{{RuleID: "r", Severity: "low", Condition: "matches(text(step.input), `\\bdrop\\b`)"}}}
	_, err := policy.Compile(ok)
	assert.NoError(t, err)
}

// A misspelt name gets the name it was probably meant to be.
func TestUnknownNamesSuggestTheKnownOne(t *testing.T) {
	for cond, want := range map[string]string{
		"stpe.type == 'x'":       "did you mean step?",
		"matchs(step.name, 'x')": "did you mean matches?",
		"len(prev_stepz) > 0":    "did you mean prev_steps?",
	} {
		_, err := policy.Compile(&policy.Policy{PolicyID: "p", Rules: []policy.Rule{{RuleID: "r", Severity: "low", Condition: cond}}})
		require.Error(t, err, cond)
		assert.Contains(t, err.Error(), want, cond)
	}
}
