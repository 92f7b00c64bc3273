package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/guard"
)

func TestCheckExitCodesAndJSON(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	decode := func(r result) guard.Decision {
		t.Helper()
		var d guard.Decision
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout+r.stderr)
		return d
	}

	r := troy(t, dir, "check", policy, "-a", "docs_search", "-i", `{"q": "rotate keys"}`)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, guard.Allow, decode(r).Decision)

	r = troy(t, dir, "check", policy, "-a", "http_post", "--metadata", `{"network_zone": "external"}`,
		"--history", filepath.Join(traces, "support_bot.json"))
	assert.Equal(t, 2, r.code, "blocked")
	d := decode(r)
	assert.Equal(t, guard.Block, d.Decision)
	require.Len(t, d.Violations, 1)
	assert.Equal(t, "external-call-after-pii", d.Violations[0].RuleID)
	assert.Contains(t, r.stderr, "blocked by 1 violation of troy-examples")

	r = troy(t, dir, "check", policy, "-a", "bash", "-i", `{"command": "sudo rm -rf /"}`, "--mode", "monitor")
	assert.Equal(t, 0, r.code, "monitor mode always allows")
	d = decode(r)
	assert.Equal(t, guard.Allow, d.Decision)
	assert.Len(t, d.Violations, 1, "and still reports")

	steps := filepath.Join(dir, "steps.json")
	require.NoError(t, os.WriteFile(steps, []byte(`[{"step_id": "1", "type": "tool_call", "name": "crm", "metadata": {"data_classification": "pii"}}]`), 0o644))
	r = troy(t, dir, "check", policy, "-a", "webhook", "--metadata", `{"network_zone": "external"}`, "--history", steps)
	assert.Equal(t, 2, r.code, "a bare list of steps works as history")

	for _, args := range [][]string{
		{"check", policy},                       // no action
		{"check", policy, "-a", "x", "-i", "{"}, // bad JSON input
		{"check", policy, "-a", "x", "--mode", "audit"},
		{"check", policy, "-a", "x", "--history", filepath.Join(dir, "missing.json")},
	} {
		r = troy(t, dir, args...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		assert.NotEmpty(t, r.stderr)
	}
}
