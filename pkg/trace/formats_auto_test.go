package trace_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/trace"
)

// A JSON list that is neither a trace nor a chat log is named for what it
// is, with the formats tried, not read as three broken messages.
func TestAutoDetectionSaysWhatItTried(t *testing.T) {
	_, err := trace.ParseAny([]byte(`[1, 2, 3]`), trace.DefaultLimits(), trace.FormatAuto, "nums.json")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the input is a JSON list of 3 numbers")
	assert.Contains(t, err.Error(), "formats tried: troy, messages")
	assert.NotContains(t, err.Error(), "messages[0]")
}
