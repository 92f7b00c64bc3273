package templates

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func readFixture(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixtures.Path(t, "fixtures", rel))
	require.NoError(t, err)
	return b
}

// messagesTrace reads an Invariant-style input: a message list, or a JSON
// string holding one.
func messagesTrace(t *testing.T, id string, input any) *trace.Trace {
	t.Helper()
	if s, ok := input.(string); ok {
		require.NoError(t, json.Unmarshal([]byte(s), &input), id)
	}
	msgs, ok := input.([]any)
	require.True(t, ok, "%s: input is not a message list", id)
	tr, err := trace.FromMessages(id, "agent", msgs)
	require.NoError(t, err, id)
	return tr
}

func benignTraces(t *testing.T) []*trace.Trace {
	t.Helper()
	var out []*trace.Trace
	for i, line := range strings.Split(strings.TrimSpace(string(readFixture(t, "invariant/sample_data.jsonl"))), "\n") {
		var rec struct{ Messages []any }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		out = append(out, messagesTrace(t, fmt.Sprintf("sample-%d", i+1), rec.Messages))
	}
	for i, line := range strings.Split(strings.TrimSpace(string(readFixture(t, "agent-instruct/agent_instruct_os.jsonl"))), "\n") {
		var msgs []any
		require.NoError(t, json.Unmarshal([]byte(line), &msgs))
		out = append(out, messagesTrace(t, fmt.Sprintf("agent-instruct-%d", i+1), msgs))
	}
	return out
}

// Each policy under examples/policies/invariant fires on its scenario's
// trace, and on none of the benign fixtures.
func TestInvariantScenarios(t *testing.T) {
	var scenarios []struct {
		Name  string `json:"name"`
		Input any    `json:"input"`
	}
	require.NoError(t, json.Unmarshal(readFixture(t, "invariant/playground-examples.json"), &scenarios))
	files, err := filepath.Glob("../../examples/policies/invariant/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 14, "14 of the 17 scenarios are expressible (see README there)")
	benign := benignTraces(t)

	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "-", 2)[0])
		require.NoError(t, err, f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := policy.Load(f)
			require.NoError(t, err)
			e, err := policy.Compile(p)
			require.NoError(t, err)
			sc := scenarios[n]
			res := e.Evaluate(messagesTrace(t, sc.Name, sc.Input))
			assert.Empty(t, res.RuleErrors)
			assert.NotEmpty(t, res.Violations, "fires on %q", sc.Name)
			for _, tr := range benign {
				res := e.Evaluate(tr)
				assert.Empty(t, res.Violations, "no violation on benign %s", tr.TraceID)
				assert.Empty(t, res.RuleErrors, "no rule error on benign %s", tr.TraceID)
			}
		})
	}
}
