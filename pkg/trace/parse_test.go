package trace

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func problems(t *testing.T, doc string, lim Limits) []string {
	t.Helper()
	_, err := Parse([]byte(doc), lim)
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	out := make([]string, len(ie.Problems))
	for i, p := range ie.Problems {
		out[i] = p.String()
	}
	return out
}

func TestParseNormalises(t *testing.T) {
	tr, err := Parse([]byte(`{"trace_id":"t","agent_name":"a","steps":[
		{"step_id":1,"type":"Tool_Call","input":{"tool":"bash"},"timestamp":"2026-02-15T12:00:00+01:00"},
		{"step_id":"2","type":"observation","parent_step_id":1,"timestamp":"2026-02-15 11:00:01"}]}`), DefaultLimits())
	require.NoError(t, err)
	assert.Equal(t, "1", tr.Steps[0].StepID)
	assert.Equal(t, "tool_call", tr.Steps[0].Type)
	assert.Equal(t, "bash", tr.Steps[0].Name, "name falls back to input.tool")
	assert.Equal(t, "2026-02-15T11:00:00Z", tr.Steps[0].Timestamp)
	assert.Equal(t, "2026-02-15T11:00:01Z", tr.Steps[1].Timestamp)
	assert.Equal(t, "1", tr.Steps[1].ParentStepID)
}

func TestParseRejectsWithPaths(t *testing.T) {
	lim := DefaultLimits()
	cases := []struct {
		name string
		doc  string
		lim  Limits
		want []string
	}{
		{"bad json", "{\n  \"trace_id\": \"t\",\n  \"steps\": [}\n", lim,
			[]string{"bad JSON at line 3, column 13: invalid character '}' looking for beginning of value"}},
		{"truncated", `{"trace_id": "t"`, lim, []string{"bad JSON at line 1, column 17: unexpected end of input (truncated file?)"}},
		{"empty", "  ", lim, []string{"bad JSON: the document is empty"}},
		{"not an object", `[1]`, lim, []string{"a trace must be a JSON object with trace_id, agent_name and steps, not a list"}},
		{"missing fields", `{"steps":[{"type":"llm_call"}]}`, lim,
			[]string{"trace_id: missing: trace_id is required", "agent_name: missing: agent_name is required", "steps[0].step_id: missing: step_id is required"}},
		{"bad enum", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"},{"step_id":"2","type":"llm_call"},{"step_id":"3","type":"llm_call"},{"step_id":"4","type":"teleport"}]}`, lim,
			[]string{`steps[3].type: "teleport" is not one of llm_call, tool_call, decision, observation`}},
		{"duplicate ids", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call"},{"step_id":"x","type":"llm_call"}]}`, lim,
			[]string{`steps[1].step_id: "x" is also the id of steps[0]: step ids must be unique`}},
		{"unknown parent", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call","parent_step_id":"ghost"}]}`, lim,
			[]string{`steps[0].parent_step_id: "ghost" names no step in this trace`}},
		{"parent cycle", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call","parent_step_id":"y"},{"step_id":"y","type":"llm_call","parent_step_id":"x"}]}`, lim,
			[]string{"steps[0].parent_step_id: parent links form a cycle (x → y → x): a step cannot be its own ancestor"}},
		{"self parent", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call","parent_step_id":"x"}]}`, lim,
			[]string{"steps[0].parent_step_id: parent links form a cycle (x → x): a step cannot be its own ancestor"}},
		{"bad timestamp", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call","timestamp":"yesterday"},{"step_id":"y","type":"llm_call","timestamp":17}]}`, lim,
			[]string{`steps[0].timestamp: "yesterday" is not an ISO 8601 time: write it like "2026-02-15T11:00:00Z"`,
				`steps[1].timestamp: must be an ISO 8601 string such as "2026-02-15T11:00:00Z", not a number`}},
		{"wrong types", `{"trace_id":7,"agent_name":"a","metadata":[],"steps":{}}`, lim,
			[]string{"trace_id: must be a string, not a number", "metadata: must be a JSON object, not a list", "steps: must be a list of steps, not an object"}},
		{"no steps", `{"trace_id":"t","agent_name":"a","steps":[]}`, lim, []string{"steps: is empty: a trace needs at least one step"}},
		{"unsafe id", `{"trace_id":"../etc","agent_name":"a","steps":[{"step_id":"x","type":"llm_call"}]}`, lim,
			[]string{`trace_id: "../etc" contains '/' or '\': a trace id is one name, not a path`}},
		{"too big", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call"}]}`, Limits{MaxBytes: 10},
			[]string{"trace is 77 bytes, over the 10-byte limit: split it or raise the limit (--max-trace-bytes)"}},
		{"too many steps", `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call"},{"step_id":"y","type":"llm_call"}]}`, Limits{MaxSteps: 1},
			[]string{"steps: has 2 steps, over the 1-step limit: split the trace or raise the limit (--max-steps)"}},
		{"two documents", "{\"trace_id\":\"t\"}\n{}", lim,
			[]string{"bad JSON at line 2, column 1: more than one JSON value (a .jsonl file holds one trace per line)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, problems(t, c.doc, c.lim))
		})
	}
}

func TestInvalidErrorKeepsTraceID(t *testing.T) {
	_, err := Parse([]byte(`{"trace_id":"keep-me","agent_name":"a","steps":[]}`), DefaultLimits())
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "keep-me", ie.TraceID)
	assert.True(t, strings.HasPrefix(ie.Error(), "invalid trace: steps:"))
}

func TestParseSteps(t *testing.T) {
	steps, err := ParseSteps([]byte(`{"step_id": "7", "type": "tool_call", "name": "x", "parent_step_id": "6"}`), DefaultLimits())
	require.NoError(t, err)
	require.Len(t, steps, 1)
	assert.Equal(t, "6", steps[0].ParentStepID, "a parent sent earlier is fine here")
	steps, err = ParseSteps([]byte(`[{"step_id": "1", "type": "llm_call"}, {"step_id": "2", "type": "observation"}]`), DefaultLimits())
	require.NoError(t, err)
	assert.Len(t, steps, 2)
	assert.Equal(t, []string{`steps[1].type: "jump" is not one of llm_call, tool_call, decision, observation`,
		`steps[1].step_id: "1" is also the id of steps[0]: step ids must be unique`},
		problemsOf(t, `[{"step_id":"1","type":"llm_call"},{"step_id":"1","type":"jump"}]`))
	assert.Equal(t, []string{"steps: is empty: send at least one step"}, problemsOf(t, `[]`))
	assert.Contains(t, problemsOf(t, `{"step_id": `)[0], "bad JSON at line 1")
}

func problemsOf(t *testing.T, doc string) []string {
	t.Helper()
	_, err := ParseSteps([]byte(doc), DefaultLimits())
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	var out []string
	for _, p := range ie.Problems {
		out = append(out, p.String())
	}
	return out
}

// Inputs that crashed or misled before: an empty body (a panic in the step
// parser), a byte order mark, a duplicated step id (which also reported a
// cycle that was not there).
func TestParseEdgeInputs(t *testing.T) {
	for _, body := range []string{"", "  \n", "\xef\xbb\xbf"} {
		_, err := ParseSteps([]byte(body), DefaultLimits())
		require.Error(t, err, "%q", body)
		assert.Contains(t, err.Error(), "the document is empty", "%q", body)
		_, err = Parse([]byte(body), DefaultLimits())
		assert.Contains(t, err.Error(), "the document is empty", "%q", body)
	}
	doc := `{"trace_id":"t","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`
	tr, err := Parse([]byte("\xef\xbb\xbf"+doc), DefaultLimits())
	require.NoError(t, err, "a UTF-8 byte order mark is skipped")
	assert.Equal(t, "t", tr.TraceID)
	steps, err := ParseSteps([]byte("\xef\xbb\xbf"+`{"step_id":"1","type":"llm_call"}`), DefaultLimits())
	require.NoError(t, err)
	assert.Len(t, steps, 1)

	_, err = Parse([]byte(`{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call"},{"step_id":"x","type":"llm_call","parent_step_id":"x"}]}`), DefaultLimits())
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Len(t, inv.Problems, 1, "only the duplicate, no spurious cycle: %v", inv.Problems)
	assert.Contains(t, inv.Problems[0].String(), "is also the id of steps[0]")
}

// Parent validation is linear: a 10,000-step chain (17 s before) and a long
// cycle are checked at once.
func TestParseLongParentChain(t *testing.T) {
	const n = 10_000
	var b strings.Builder
	b.WriteString(`{"trace_id":"chain","agent_name":"a","steps":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		parent := "null"
		if i > 0 {
			parent = fmt.Sprintf(`"s%d"`, i-1)
		}
		fmt.Fprintf(&b, `{"step_id":"s%d","type":"llm_call","parent_step_id":%s}`, i, parent)
	}
	b.WriteString("]}")
	start := time.Now()
	tr, err := Parse([]byte(b.String()), DefaultLimits())
	require.NoError(t, err)
	assert.Len(t, tr.Steps, n)
	t.Logf("10,000-step chain parsed in %s", time.Since(start))

	cyc := strings.Replace(b.String(), `"parent_step_id":null`, fmt.Sprintf(`"parent_step_id":"s%d"`, n-1), 1)
	_, err = Parse([]byte(cyc), DefaultLimits())
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	require.Len(t, inv.Problems, 1, "one cycle, reported once")
	assert.Contains(t, inv.Problems[0].Message, "parent links form a cycle (s0 → s9999 → s9998")
	assert.Contains(t, inv.Problems[0].Message, "… 9991 more …")
}
