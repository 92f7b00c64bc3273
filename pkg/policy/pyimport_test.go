package policy

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

func TestFromPython(t *testing.T) {
	cases := map[string]string{
		"get(step, 'metadata.data_classification') == 'pii' and any_next(lambda s: s['type'] == 'tool_call' and get(s, 'metadata.network_zone') == 'external')": "get(step, 'metadata.data_classification') == 'pii' and any_next({#['type'] == 'tool_call' and get(#, 'metadata.network_zone') == 'external'})",
		"matches(json.dumps(step.get('input', {})), r'ignore (all )?previous|run\\s+as admin')":                                                                 "matches(text(get(step, 'input', {})), `ignore (all )?previous|run\\s+as admin`)",
		"get(step, 'metadata.requires_approval') is True and get(step, 'metadata.approval_token') is None":                                                      "get(step, 'metadata.requires_approval') == true and get(step, 'metadata.approval_token') == nil",
		"step['type'] != 'llm_call' and not (step.get('name') is not None)":                                                                                     "step['type'] != 'llm_call' and not (get(step, 'name') != nil)",
		"step_index == 0 and len(prev_steps) == 0 and str(step_index) in ['0', '1']":                                                                            "step_index == 0 and len(prev_steps) == 0 and py_str(step_index) in ['0', '1']",
		`matches(step['description'], "it's")`:                                                                                                                  `matches(step['description'], 'it\'s')`,
	}
	for py, want := range cases {
		got, err := FromPython(py)
		require.NoError(t, err, py)
		assert.Equal(t, want, got)
		_, _, prob := compileCondition(Rule{RuleID: "r", Condition: got})
		assert.Nil(t, prob, got)
	}
}

func TestFromPythonRefusesWhatItDoesNotKnow(t *testing.T) {
	cases := map[string]string{
		"[s for s in steps]":            `column 2: "s" is not part of the supported subset`,
		"step.name == 'x'":              "attribute access step.name is not supported (use get(step, 'key') or step['key'])",
		"lambda s: True":                "lambda is supported only as the argument of any_step, any_next or any_prev",
		"any_next(len)":                 "any_next takes a lambda",
		"f'{step}'":                     "f-strings are not supported",
		"re.search('x', step['input'])": `"re" is not part of the supported subset`,
		"step_index ** 2 > 4":           "operator ** is not supported",
		"any_prev(lambda a: any_next(lambda b: True))": "a lambda inside a lambda is not supported",
		"get(step, 'x') is 5":                          "`is` is supported only with None, True or False",
		"step['a'] == 1 # note":                        "comments are not supported",
		"get(step, 'x'":                                `missing ")"`,
	}
	for py, want := range cases {
		_, err := FromPython(py)
		require.Error(t, err, py)
		assert.Contains(t, err.Error(), want, py)
	}
}

// The reference policy the bench uses translates whole, and the translation
// fires exactly where the hand-written expr version does.
func TestFromPythonOnTheBenchPolicy(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "bench", "policy_py.json"))
	require.NoError(t, err)
	imported, probs := ImportPython(raw)
	require.Empty(t, probs)
	ie, err := Compile(imported)
	require.NoError(t, err)
	hand, err := Load("testdata/bench_policy.yaml")
	require.NoError(t, err)
	he, err := Compile(hand)
	require.NoError(t, err)
	for i := range 50 {
		tr := longTraceN(t, i)
		got, want := ie.Evaluate(tr), he.Evaluate(tr)
		require.Empty(t, got.RuleErrors)
		require.Equal(t, len(want.Violations), len(got.Violations), "trace %d", i)
		for j := range want.Violations {
			assert.Equal(t, want.Violations[j].RuleID, got.Violations[j].RuleID)
			assert.Equal(t, want.Violations[j].StepID, got.Violations[j].StepID)
		}
	}
}

func longTraceN(t *testing.T, n int) *trace.Trace {
	t.Helper()
	raw, err := json.Marshal(tracegen.Trace(7, n, 20))
	require.NoError(t, err)
	tr, err := trace.Parse(raw, trace.DefaultLimits())
	require.NoError(t, err)
	return tr
}

// Issue 17 #3: a chained .get used to come out as expr's method call
// (get(step, 'metadata', {}).get('x')), which import called translated
// and lint then refused. Chains translate whole, and what cannot be
// translated is refused with its column.
func TestFromPythonChainsGet(t *testing.T) {
	cases := map[string]string{
		"step.get('metadata', {}).get('x') == 1":              "get(get(step, 'metadata', {}), 'x') == 1",
		"step['input'].get('a').get('b', 'z') == 'q'":         "get(get(step['input'], 'a'), 'b', 'z') == 'q'",
		"any_prev(lambda s: s.get('output', {})['rows'] > 5)": "any_prev({get(#, 'output', {})['rows'] > 5})",
		"(step['input']).get('q') is None":                    "get((step['input']), 'q') == nil",
	}
	for py, want := range cases {
		got, err := FromPython(py)
		require.NoError(t, err, py)
		assert.Equal(t, want, got)
	}
	for py, want := range map[string]string{
		"step.get('metadata').name == 'x'": "column 22: attribute access get(step, 'metadata').name is not supported",
		"step.get('a.b') == 1":             `.get("a.b") reads a key with a dot`,
		"matches(step['name'], '\\bdrop')": `'\b' is a control character in a Python string`,
	} {
		_, err := FromPython(py)
		require.Error(t, err, py)
		assert.Contains(t, err.Error(), want, py)
	}

	// and the import's output is what lint accepts, and means what it meant
	imported, probs := ImportPython([]byte(`{"policy_id": "p", "rules": [
	  {"rule_id": "chained", "condition": "step.get('metadata', {}).get('x') == 1", "severity": "high"},
	  {"rule_id": "attr", "condition": "step.get('metadata').name == 'x'"}]}`))
	require.Len(t, probs, 1)
	assert.Equal(t, "attr", probs[0].RuleID)
	assert.Contains(t, probs[0].Message, "column 22")
	e, err := Compile(imported)
	require.NoError(t, err)
	tr, err := trace.Parse([]byte(`{"trace_id": "t", "agent_name": "a", "steps": [
	  {"step_id": "a", "type": "tool_call", "name": "n", "metadata": {"x": 1}},
	  {"step_id": "b", "type": "tool_call", "name": "n", "metadata": {"x": 2}},
	  {"step_id": "c", "type": "tool_call", "name": "n"}]}`), trace.DefaultLimits())
	require.NoError(t, err)
	res := e.Evaluate(tr)
	require.Empty(t, res.RuleErrors)
	require.Len(t, res.Violations, 1)
	assert.Equal(t, "a", res.Violations[0].StepID)
}

// What the translation means is what Python meant (a review found these
// compiled but meant something else): `not` binds looser than a
// comparison, `in` on text is a substring test, str(None) is 'None'.
func TestFromPythonKeepsPythonsMeaning(t *testing.T) {
	tr, err := trace.Parse([]byte(`{"trace_id": "t", "agent_name": "a", "steps": [
	  {"step_id": "s", "type": "tool_call", "name": "bash", "input": {"cmd": "rm -rf /"}, "metadata": {"approved": true, "n": 3}}]}`), trace.DefaultLimits())
	require.NoError(t, err)
	// fires translates py and says whether it fires on the step (no errors)
	fires := func(py string) bool {
		cond, err := FromPython(py)
		require.NoError(t, err, py)
		e, err := Compile(&Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: cond, Severity: "low"}}})
		require.NoError(t, err, "%s → %s", py, cond)
		res := e.Evaluate(tr)
		assert.Empty(t, res.RuleErrors, "%s → %s", py, cond)
		return len(res.Violations) == 1
	}
	for _, py := range []string{
		"not step.get('metadata', {}).get('approved') is None",
		"not step['type'] == 'llm_call'",
		"not not step['type'] == 'tool_call'",
		"'rm -rf' in step.get('input', {}).get('cmd', '')",
		"'cmd' in step['input'] and 'x' not in step['input']",
		"step['type'] in ['tool_call', 'x'] and 'llm_call' not in ['a', step['type']]",
		"str(step.get('metadata', {}).get('approved')) == 'True' and str(get(step, 'metadata.missing')) == 'None'",
		"str(get(step, 'metadata.n')) == '3' and 3 in [1, 2, get(step, 'metadata.n')]",
		"any_step(lambda s: not s['name'] == 'other' and 'rf' in s['input']['cmd'])",
		"len([1, 2]) == 2 and not (step['name'] == 'x' or step['name'] == 'y')",
	} {
		assert.True(t, fires(py), "%s: true in Python", py)
	}
	for _, py := range []string{
		"not step['type'] == 'tool_call'",
		"'rm -rf x' in get(step, 'input.cmd')",
		"str(get(step, 'metadata.approved')) == 'true'",
	} {
		assert.False(t, fires(py), "%s: false in Python", py)
	}
}
