package trace

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateID(t *testing.T) {
	for _, id := range []string{"support-bot-001", "a b", "*", ">", "%00", "trace.v2", "ünïcode-id", strings.Repeat("x", MaxIDBytes)} {
		assert.NoError(t, ValidateID(id), "%q is a valid id", id)
	}
	for id, want := range map[string]string{
		"":                       "is empty",
		strings.Repeat("x", 300): "300 bytes, over the 255-byte limit",
		"../../escaped/pwned":    "contains '/' or '\\'",
		`..\evil`:                "contains '/' or '\\'",
		".":                      "names a folder",
		"..":                     "names a folder",
		"bad\xffutf8":            "not valid UTF-8",
		"was-invalid-\uFFFD":     "U+FFFD",
		"nul\x00byte":            "control character U+0000",
		"line\nbreak":            "control character U+000A",
		" padded":                "white space",
	} {
		err := ValidateID(id)
		require.Error(t, err, "%q", id)
		assert.Contains(t, err.Error(), want, "%q", id)
	}
}

// Every way a trace comes in checks its id: troy's format and chat logs
// (which skipped the check before), and JSON whose invalid UTF-8 the decoder
// turned into U+FFFD.
func TestParseRefusesUnsafeIDs(t *testing.T) {
	for name, doc := range map[string]string{
		"troy":         `{"trace_id":"../../escaped/pwned","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`,
		"chat object":  `{"id":"../../escaped-http/pwned","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
		"chat traj":    `{"trace_id":"../x","traj":[{"role":"user","content":"hi"}]}`,
		"invalid utf8": "{\"trace_id\":\"bad\xff\",\"agent_name\":\"a\",\"steps\":[{\"step_id\":\"1\",\"type\":\"llm_call\"}]}",
		"long":         `{"trace_id":"` + strings.Repeat("a", 300) + `","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`,
	} {
		_, err := ParseAny([]byte(doc), DefaultLimits(), FormatAuto, "fallback")
		var inv *InvalidError
		require.ErrorAs(t, err, &inv, name)
		assert.Contains(t, inv.Error(), "id", name)
	}
	tr, err := ParseAny([]byte(`[{"role":"user","content":"hi"}]`), DefaultLimits(), FormatAuto, "in-chat.json")
	require.NoError(t, err)
	assert.Equal(t, "in-chat.json", tr.TraceID, "a chat log without an id is named by its source")
}
