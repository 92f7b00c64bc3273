package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplay(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "audit", filepath.Join(traces, "support_bot.json"), policy, "-j", "a.json", "-o", "r.md")
	require.Equal(t, 0, r.code, r.stderr)

	r = troy(t, dir, "replay", "a.json", "--no-interactive")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "trace support-bot-pii-exfil-001 · agent support-bot · policy troy-examples")
	assert.Contains(t, r.stdout, "  1  s2  tool_call crm_lookup — Fetch the customer's record")
	assert.Contains(t, r.stdout, "⚠ CRITICAL pii-exfiltration")

	narrower := "policy_id: narrower\nrules:\n  - rule_id: pii-exfiltration\n    description: same rule\n    condition: \"get(step, 'metadata.data_classification') == 'pii'\"\n    severity: critical\n    weight: 50\n  - rule_id: any-http\n    condition: step.name == 'http_post'\n    severity: low\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "narrower.yaml"), []byte(narrower), 0o644))
	r = troy(t, dir, "replay", "a.json", "--no-interactive", "--policy", "narrower.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "⚠ CRITICAL pii-exfiltration", "kept")
	assert.Contains(t, r.stdout, "+ NEW LOW any-http")
	assert.Contains(t, r.stdout, "- GONE HIGH external-call-after-pii")
	assert.Contains(t, r.stdout, "1 new, 1 gone, 1 unchanged")
	assert.Contains(t, r.stdout, "risk 70 → 60 under narrower")

	r = troy(t, dir, "replay", "a.json", "--no-interactive", "--policy", "narrower.yaml", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		RiskAfter int `json:"risk_after"`
		Diff      struct{ Added, Removed, Kept []map[string]any }
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	assert.Equal(t, 60, out.RiskAfter)
	assert.Len(t, out.Diff.Added, 1)

	r = troy(t, dir, "replay", "a.json")
	assert.Equal(t, 0, r.code, "stdout is not a terminal: printed, not opened")
	assert.Contains(t, r.stdout, "⚠ CRITICAL pii-exfiltration")
	r = troy(t, dir, "replay", "r.md", "--no-interactive")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "r.md is neither an audit.json (troy audit writes one) nor a trace")

	// a trace file: evaluated here under the policies given
	bot := filepath.Join(traces, "support_bot.json")
	r = troy(t, dir, "replay", bot, "--no-interactive")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "a trace file needs --policy")
	r = troy(t, dir, "replay", bot, "--no-interactive", "--policy", policy, "--compare-policy", "narrower.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "why: ", "explained offline")
	assert.Contains(t, r.stdout, "+ NEW LOW any-http")
	assert.Contains(t, r.stdout, "risk 70 → 60 under narrower")
}
