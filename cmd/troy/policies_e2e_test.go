package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPoliciesCommands(t *testing.T) {
	dir := t.TempDir()
	r := troy(t, dir, "policies", "list")
	require.Equal(t, 0, r.code, r.stderr)
	for _, n := range []string{"minimal", "agent_safety", "owasp_llm_top10", "data_protection", "safe_browsing", "soc2", "hipaa"} {
		assert.Contains(t, r.stdout, n)
	}
	r = troy(t, dir, "policies", "show", "soc2")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "SOC 2 CC6.1")
	r = troy(t, dir, "policies", "show", "pci")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `no template "pci": choose one of agent_safety`)

	r = troy(t, dir, "policies", "copy", "hipaa", "-o", "mine.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "policies", "copy", "hipaa", "-o", "mine.yaml")
	assert.Equal(t, 1, r.code, "no silent overwrite")
	assert.Contains(t, r.stderr, "mine.yaml exists")
	r = troy(t, dir, "policies", "lint", "mine.yaml")
	assert.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "mine.yaml: ok, 6 rules, sha256:")

	r = troy(t, dir, "policies", "init", "-t", "soc2", "-t", "hipaa", "-t", "minimal", "-t", "agent_safety", "-o", "merged.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "policies", "lint", "merged.yaml")
	assert.Equal(t, 0, r.code, r.stdout)
	assert.Contains(t, string(read(t, dir, "merged.yaml")), "rule_id: agent_safety.destructive-shell-command")

	bad := "policy_id: p\nrules:\n  - rule_id: a\n    condition: step.type == \n  - rule_id: b\n    condition: matches(step.input, '\\s')\n    severity: urgent\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644))
	r = troy(t, dir, "policies", "lint", "bad.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, `bad.yaml: rule "b" severity: "urgent" is not one of critical, high, medium, low`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(strings.Replace(bad, "urgent", "high", 1)), 0o644))
	r = troy(t, dir, "policies", "lint", "bad.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, `bad.yaml: rule "a" condition (line 1, column`)
	assert.Contains(t, r.stdout, `bad.yaml: rule "b" condition (line 1, column 23): invalid char escape`)
	assert.Contains(t, r.stderr, "bad.yaml: 2 problem(s)")
}

func TestPoliciesImport(t *testing.T) {
	dir := t.TempDir()
	old := `{"policy_id": "legacy", "rules": [
	  {"rule_id": "ok", "condition": "step['type'] == 'tool_call' and get(step, 'metadata.x') is None", "severity": "low"},
	  {"rule_id": "comprehension", "condition": "len([s for s in steps if s['type'] == 'tool_call']) > 3"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.json"), []byte(old), 0o644))

	r := troy(t, dir, "policies", "import", "old.json", "-o", "new.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `rule "comprehension" condition: column 6: "s" is not part of the supported subset`)
	_, err := os.Stat(filepath.Join(dir, "new.yaml"))
	assert.True(t, os.IsNotExist(err), "nothing written without --partial")

	r = troy(t, dir, "policies", "import", "old.json", "-o", "new.yaml", "--partial")
	assert.Equal(t, 1, r.code, "still says a rule was left out")
	assert.Contains(t, r.stdout, "wrote new.yaml: 1 rules translated")
	assert.Contains(t, string(read(t, dir, "new.yaml")), "step['type'] == 'tool_call' and get(step, 'metadata.x') == nil")
	r = troy(t, dir, "policies", "lint", "new.yaml")
	assert.Equal(t, 0, r.code, r.stdout)
}

// policies push goes to a running troy — never into a throwaway embedded
// store no server would see — and says so when nothing answers.
func TestPoliciesPushGoesToARunningTroy(t *testing.T) {
	_, policy := examples(t)
	dir := t.TempDir()
	natsURL, _ := startServe(t, dir)
	r := troy(t, dir, "policies", "push", policy, "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "as the latest version of troy-examples: sha256:")

	elsewhere := t.TempDir()
	r = troy(t, elsewhere, "policies", "push", policy)
	if r.code != 0 { // nothing on troy serve's default address (the usual case here)
		assert.Contains(t, r.stderr, "nothing answers at nats://127.0.0.1:4222, troy serve's default address")
	}
	_, err := os.Stat(filepath.Join(elsewhere, ".troy-data"))
	assert.True(t, os.IsNotExist(err), "no embedded store was made")
}

// A .json output gets JSON: the extension decides the format.
func TestPolicyFilesTakeTheirExtensionsFormat(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"policies", "copy", "hipaa", "-o", "copy.json"}, {"policies", "init", "-t", "hipaa", "-o", "init.json"}} {
		r := troy(t, dir, args...)
		require.Equal(t, 0, r.code, r.stderr)
		var v map[string]any
		require.NoError(t, json.Unmarshal(read(t, dir, args[len(args)-1]), &v), "%v writes JSON", args)
		assert.NotEmpty(t, v["rules"])
		r = troy(t, dir, "policies", "lint", args[len(args)-1])
		assert.Equal(t, 0, r.code, r.stdout+r.stderr)
	}
	r := troy(t, dir, "policies", "copy", "hipaa", "-o", "copy.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, string(read(t, dir, "copy.yaml")), "policy_id: hipaa", "YAML, comments and all, for any other name")
}
