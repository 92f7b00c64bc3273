package trace

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromMessages(t *testing.T) {
	var msgs []any
	require.NoError(t, json.Unmarshal([]byte(`[
	  {"role": "user", "content": "Summarize notes.txt"},
	  {"id": "1", "type": "function", "function": {"name": "read", "arguments": {"file": "notes.txt"}}},
	  {"role": "tool", "tool_call_id": "1", "content": "meeting notes"},
	  {"role": "assistant", "content": "Sending.", "tool_calls": [
	    {"id": "2", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\": \"a@b.c\"}"}}]},
	  {"role": "tool", "tool_call_id": "2", "content": "sent"}
	]`), &msgs))
	tr, err := FromMessages("t", "agent", msgs)
	require.NoError(t, err)
	var got []string
	for _, s := range tr.Steps {
		got = append(got, s.StepID+":"+s.Type+":"+s.Name+":"+s.ParentStepID)
	}
	assert.Equal(t, []string{"1:observation:user:", "2:tool_call:read:", "3:observation:read:2", "4:llm_call:assistant:", "5:tool_call:send_email:", "6:observation:send_email:5"}, got)
	assert.Equal(t, map[string]any{"to": "a@b.c"}, tr.Steps[4].Input, "string arguments are parsed")

	_, err = FromMessages("t", "a", []any{map[string]any{"role": "robot"}})
	assert.ErrorContains(t, err, `messages[0]: unknown role "robot"`)
}
