package trace

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func steps(tr *Trace) []string {
	var got []string
	for _, s := range tr.Steps {
		got = append(got, s.StepID+":"+s.Type+":"+s.Name+":"+s.ParentStepID)
	}
	return got
}

func TestFromMessages(t *testing.T) {
	var msgs []any
	require.NoError(t, json.Unmarshal([]byte(`[
	  {"role": "system", "content": "Be helpful."},
	  {"role": "user", "content": "Summarize notes.txt"},
	  {"id": "1", "type": "function", "function": {"name": "read", "arguments": {"file": "notes.txt"}}},
	  {"role": "tool", "tool_call_id": "1", "content": "meeting notes"},
	  {"role": "assistant", "content": "Sending.", "tool_calls": [
	    {"id": "2", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\": \"a@b.c\"}"}}]},
	  {"role": "tool", "tool_call_id": "2", "content": "sent"},
	  {"role": "tool", "tool_call_id": "99", "content": "orphan result"}
	]`), &msgs))
	tr, err := FromMessages("t", "agent", msgs)
	require.NoError(t, err)
	assert.Equal(t, []string{"1:observation:system:", "2:observation:user:", "3:tool_call:read:", "4:llm_call:assistant:",
		"5:tool_call:send_email:4", "6:observation:tool:"}, steps(tr))
	assert.Equal(t, "meeting notes", tr.Steps[2].Output, "a tool's result is its call's output")
	assert.Equal(t, map[string]any{"to": "a@b.c"}, tr.Steps[4].Input, "string arguments are parsed")
	assert.Equal(t, "sent", tr.Steps[4].Output)

	_, err = FromMessages("t", "a", []any{map[string]any{"role": "robot"}, "x",
		map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "1"}}}})
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	var probs []string
	for _, p := range ie.Problems {
		probs = append(probs, p.String())
	}
	assert.Equal(t, []string{
		`messages[0].role: "robot" is not one of system, user, assistant, tool`,
		"messages[1]: a message must be a JSON object, not a string (\"x\")",
		"messages[2].tool_calls[0].function: a tool call needs a function object with a name and arguments",
	}, probs)
}

func TestParseAnyDetectsFormats(t *testing.T) {
	lim := DefaultLimits()
	cases := []struct {
		name, doc, id string
		steps         int
	}{
		{"troy", `{"trace_id":"x","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`, "x", 1},
		{"bare list", `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`, "fallback", 2},
		{"messages wrapper", `{"messages":[{"role":"user","content":"hi"}],"id":"m1"}`, "m1", 1},
		{"tau-bench", `{"task_id":3,"trial":1,"reward":0.0,"info":{},"traj":[{"role":"user","content":"hi"}]}`, "task-3-trial-1", 1},
	}
	for _, c := range cases {
		tr, err := ParseAny([]byte(c.doc), lim, FormatAuto, "fallback")
		require.NoError(t, err, c.name)
		assert.Equal(t, c.id, tr.TraceID, c.name)
		assert.Len(t, tr.Steps, c.steps, c.name)
	}
	tr, err := ParseAny([]byte(`{"task_id":3,"trial":1,"reward":0.0,"traj":[{"role":"user","content":"hi"}]}`), lim, FormatAuto, "")
	require.NoError(t, err)
	assert.Equal(t, 0.0, tr.Metadata["reward"], "tau-bench's outcome is kept as metadata")

	_, err = ParseAny([]byte(`[{"role":"user","content":"hi"}]`), lim, FormatTroy, "")
	assert.ErrorContains(t, err, "a trace must be a JSON object", "--format troy forces the troy format")
	_, err = ParseAny([]byte(`{"x": 1}`), lim, FormatMessages, "")
	assert.ErrorContains(t, err, "not a chat log")
	_, err = ParseAny([]byte(`[{"role":"user"`), lim, FormatAuto, "")
	assert.ErrorContains(t, err, "bad JSON at line 1")
	_, err = ParseAny([]byte(`{}`), lim, "yaml", "")
	assert.ErrorContains(t, err, `format "yaml" is not one of auto, troy, messages, otlp`)
	_, err = ParseAny([]byte(`[]`), lim, FormatAuto, "")
	assert.ErrorContains(t, err, "messages: is empty")
}
