package policy

import (
	"os"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 17 #4: `condition: true` failed with a bare json error naming no
// rule and no line, and the shape errors hid every condition error until
// they were fixed. Every problem now comes at once, in file order, each
// with its line.
func TestParseEngineReportsEveryProblemWithItsLine(t *testing.T) {
	_, err := ParseEngine([]byte(`policy_id: p
rules:
  - rule_id: always
    condition: true
    severity: hgh
  - rule_id: bad-regex
    condition: matches(get(step,'input.query',''), '\bdrop\b')
    weigth: 3
  - rule_id: always
    condition: |
      step.type == 'tool_call' and
      step.input.x ==== 2
    controls: SOC2
  - just text
`), Options{})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	var got []string
	for _, p := range pe.Problems {
		got = append(got, p.String())
	}
	want := []string{
		`line 4: rule "always" condition: is the YAML boolean true, not an expression`,
		`line 5: rule "always" severity: "hgh" is not one of`,
		`line 7: rule "bad-regex" condition (line 1, column 37): in '…' or "…" \b is a backspace`,
		`line 8: rule "bad-regex" weigth: unknown field (did you mean weight?)`,
		`line 9: rule "always" rule_id: duplicate`,
		`line 12: rule "always" condition (line 2, column 16): unexpected token`,
		`line 13: rule "always" controls: is the text "SOC2", not a list`,
		`line 14: rules[3]: is the text "just text", not a rule`,
	}
	require.Len(t, got, len(want), "%q", got)
	for i := range want {
		assert.Contains(t, got[i], want[i])
	}

	// YAML 1.2's text that troy's YAML 1.1 reader takes for a boolean is
	// named, with its line, instead of failing the decode with no line
	_, err = ParseEngine([]byte("policy_id: p\nrules:\n  - rule_id: on\n    condition: 'true'\n    controls: [SOC2, NO]\n"), Options{})
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 2, "%v", pe)
	assert.Contains(t, pe.Problems[0].String(), `line 3: rule "on" rule_id: on reads as a boolean in YAML 1.1, which troy's reader follows: quote it ("on")`)
	assert.Contains(t, pe.Problems[1].String(), `line 5: rule "on" controls: holds NO (line 5), which reads as a boolean in YAML 1.1: quote it ("NO")`)

	// a key given twice is named (YAML readers keep the last one silently)
	_, err = ParseEngine([]byte("policy_id: p\nrules:\n  - rule_id: a\n    condition: 'true'\n    condition: step.type == 'x'\n"), Options{})
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 1, "%v", pe)
	assert.Equal(t, `line 5: rule "a" condition: given twice (lines 4 and 5): keep one`, pe.Problems[0].String())

	// a single line of JSON gets no lines, and still every problem
	_, err = ParseEngine([]byte(`{"policy_id": "p", "rules": [{"rule_id": 7, "condition": "step.x ==="}, {"rule_id": "b", "condition": false}]}`), Options{})
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 3, "%v", pe)
	assert.Equal(t, `rule "7" rule_id: is the number 7, not text: quote it ("7")`, pe.Problems[0].String())
	assert.Contains(t, pe.Problems[1].String(), `rule "b" condition: is the YAML boolean false`)
	assert.Contains(t, pe.Problems[2].String(), `condition (line 1, column`)
}

// Issue 17 #6: the original tool's policies (JSON, Python conditions)
// load as they are, translated on the way in; what does not translate is
// refused with both readings.
func TestParseEngineTranslatesTheOriginalToolsPolicies(t *testing.T) {
	l, err := ParseEngine([]byte(`{"policy_id": "old", "rules": [
	  {"rule_id": "py", "condition": "get(step, 'metadata.requires_approval') is True and step.get('metadata', {}).get('approval_token') is None", "severity": "high"},
	  {"rule_id": "expr", "condition": "step.type == 'tool_call'"}]}`), Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"py"}, l.Translated)
	r, _ := l.Policy().Rule("py")
	assert.Equal(t, "get(step, 'metadata.requires_approval') == true and get(get(step, 'metadata', {}), 'approval_token') == nil", r.Condition)

	_, err = ParseEngine([]byte(`{"policy_id": "old", "rules": [
	  {"rule_id": "py", "condition": "any_step(lambda s: s.name.startswith('x'))"},
	  {"rule_id": "broken", "condition": "step.type = 'x'"}]}`), Options{})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 2)
	assert.Contains(t, pe.Problems[0].Message, "read as the original tool's Python it does not translate either: column 22: attribute access #.name")
	assert.Contains(t, pe.Problems[1].Message, `does not translate either: column 11: "=" is not supported`, "in the predecessor's file, both readings")

	// Python words inside a string literal do not make a condition Python;
	// a translation that fails says what it translated to
	_, err = ParseEngine([]byte(`{"policy_id": "p", "rules": [
	  {"rule_id": "typo", "condition": "step.output.status == 'False' and step.x ==="}]}`), Options{})
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 1)
	assert.NotContains(t, pe.Problems[0].Message, "Python")
	_, err = ParseEngine([]byte(`{"policy_id": "p", "rules": [
	  {"rule_id": "py", "condition": "len(5) == 1 and step['a'] is None"}]}`), Options{})
	require.ErrorAs(t, err, &pe)
	require.Len(t, pe.Problems, 1)
	assert.Contains(t, pe.Problems[0].Message, "read as the original tool's Python it translates to len(5) == 1 and step['a'] == nil, which fails:")

	// In the predecessor's files every condition is read as Python, also
	// those valid in both languages, whose meanings differ ('rm' in cmd);
	// and one that is Python but not expr, with nothing to show it, too.
	l, err = ParseEngine([]byte(`{"policy_id": "old", "rules": [
	  {"rule_id": "in", "condition": "'rm' in step['input']['cmd']"},
	  {"rule_id": "not", "condition": "not step['type'] == 'llm_call'"},
	  {"rule_id": "none", "condition": "step.get('x') is None"}]}`), Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"in", "not", "none"}, l.Translated)
	r, _ = l.Policy().Rule("in")
	assert.Equal(t, "py_in(step['input']['cmd'], 'rm')", r.Condition)
	r, _ = l.Policy().Rule("not")
	assert.Equal(t, "not (step['type'] == 'llm_call')", r.Condition)
	l, err = ParseEngine([]byte(`{"policy_id": "old", "rules": [{"rule_id": "not", "condition": "not step['type'] == 'llm_call'"}]}`), Options{})
	require.NoError(t, err, "Python, with nothing Python-only in it: translated because it is not expr")
	r, _ = l.Policy().Rule("not")
	assert.Equal(t, "not (step['type'] == 'llm_call')", r.Condition)

}

// The shared bench's policy of troy's predecessor loads as it is.
func TestTheBenchsPythonPolicyLoadsDirectly(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "bench", "policy_py.json"))
	require.NoError(t, err)
	l, err := ParseEngine(raw, Options{})
	require.NoError(t, err)
	assert.NotEmpty(t, l.Translated)
}
