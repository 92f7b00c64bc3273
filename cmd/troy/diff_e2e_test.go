package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/report"
)

// Two batches of the example traces: the second drops one trace, adds
// another, and audits with a policy that has one more rule. troy diff
// finds exactly that rule's hits as new, nothing fixed, the added and the
// missing trace, and fails the build only at the severity asked.
func TestDiffTwoBatches(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "audit-batch", traces, policy, "--out-dir", "before")
	require.Equal(t, 0, r.code, r.stderr)

	in := filepath.Join(dir, "in")
	require.NoError(t, os.CopyFS(in, os.DirFS(traces)))
	require.NoError(t, os.Remove(filepath.Join(in, "clean_run.json")))
	var tr map[string]any
	require.NoError(t, json.Unmarshal(read(t, in, "support_bot.json"), &tr))
	tr["trace_id"] = "support-bot-copy"
	b, _ := json.Marshal(tr)
	require.NoError(t, os.WriteFile(filepath.Join(in, "copy.json"), b, 0o644))
	pol, err := os.ReadFile(policy)
	require.NoError(t, err)
	stricter := string(pol) + "\n  - rule_id: no-llm-calls\n    description: an LLM was called\n    severity: high\n    condition: step.type == 'llm_call'\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stricter.yaml"), []byte(stricter), 0o644))
	r = troy(t, dir, "audit-batch", "in", "stricter.yaml", "--out-dir", "after")
	require.Equal(t, 0, r.code, r.stderr)

	// the known answer: one new violation per llm_call step of every trace on both sides
	want := 0
	files, _ := filepath.Glob(filepath.Join(in, "*.json"))
	for _, f := range files {
		if filepath.Base(f) == "copy.json" {
			continue
		}
		var tt struct {
			Steps []struct{ Type string } `json:"steps"`
		}
		require.NoError(t, json.Unmarshal(read(t, "", f), &tt))
		for _, s := range tt.Steps {
			if s.Type == "llm_call" {
				want++
			}
		}
	}
	require.Positive(t, want)

	r = troy(t, dir, "diff", "before", "after", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var d report.Regression
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &d))
	assert.Len(t, d.NewV, want, "exactly the new rule's hits")
	for _, c := range d.NewV {
		assert.Equal(t, "no-llm-calls", c.RuleID)
	}
	assert.Empty(t, d.Fixed)
	assert.Equal(t, []string{"support-bot-copy"}, d.Added)
	assert.Equal(t, []string{"docs-helper-clean-006"}, d.Missing)
	assert.Positive(t, d.Unchanged)

	r = troy(t, dir, "diff", "before", "after", "--fail-on-new", "high")
	assert.Equal(t, 2, r.code, "a new high finding fails the build")
	assert.Contains(t, r.stdout, "NEW    high     no-llm-calls")
	assert.Contains(t, r.stderr, "new violations at or above high")
	r = troy(t, dir, "diff", "before", "after", "--fail-on-new", "critical")
	assert.Equal(t, 0, r.code, "none at critical")
	r = troy(t, dir, "diff", filepath.Join("before", "support-bot-pii-exfil-001", "audit.json"), filepath.Join("after", "support-bot-copy", "audit.json"), "--fail-on-new", "critical")
	assert.Equal(t, 1, r.code, "a gate that compared nothing does not pass")
	assert.Contains(t, r.stderr, "nothing to compare")

	// two single audits, and a folder that holds none
	one := filepath.Join("before", "support-bot-pii-exfil-001", "audit.json")
	r = troy(t, dir, "diff", one, one)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "violations: 0 new, 0 fixed")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	r = troy(t, dir, "diff", "before", "empty")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NEW: empty holds no audit")
	assert.True(t, strings.Contains(r.stderr, "audit-batch"), r.stderr)

	// the two batches as two days of logs: the new rule moved most
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(dir, "before"), filepath.Join(dir, "logs", "2026-11-01")))
	require.NoError(t, os.Rename(filepath.Join(dir, "after"), filepath.Join(dir, "logs", "2026-11-02")))
	r = troy(t, dir, "trends")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "2026-11-01       6")
	assert.Contains(t, r.stdout, "2026-11-02       6")
	assert.Regexp(t, `(?m)^  no-llm-calls +0\.00 → `, r.stdout)
}

// A trace troy audit rejects still gives CI its files: the input as an
// error, not a missing file.
func TestAuditRejectedStillWritesCIFiles(t *testing.T) {
	_, policy := examples(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"trace_id": "x", "steps": "no"}`), 0o644))
	r := troy(t, dir, "audit", "bad.json", policy, "--junit", "j.xml", "--sarif", "s.sarif")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, string(read(t, dir, "j.xml")), `errors="1"`)
	assert.Contains(t, string(read(t, dir, "s.sarif")), "bad.json was not audited")
}

// troy --version says what troy version says; -m is --model.
func TestVersionFlagAndModelShorthand(t *testing.T) {
	dir := t.TempDir()
	a := troy(t, dir, "--version")
	b := troy(t, dir, "version")
	require.Equal(t, 0, a.code, a.stderr)
	assert.Equal(t, b.stdout, a.stdout)
	assert.True(t, strings.HasPrefix(a.stdout, "troy "))
	r := troy(t, dir, "audit", "--help")
	assert.Contains(t, r.stdout, "-m, --model")
}

// An LLM that cannot be reached is said once on stderr, with why; the
// audit still ends with heuristic explanations.
func TestUnreachableLLMIsSaid(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "audit", filepath.Join(traces, "clean_run.json"), policy, "-j", "a.json", "-o", "r.md", "--base-url", "http://127.0.0.1:9/v1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "explanations fell back to the heuristic"), r.stderr)
	assert.Contains(t, r.stderr, "connection refused")
}

// A rule that errors at run time is said in the batch's one-line summary,
// summary.md and batch.json, and --fail-on-rule-error makes it exit 1.
func TestRuleErrorsAreNotBuriedInReports(t *testing.T) {
	traces, _ := examples(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "re.yaml"), []byte("policy_id: re\nrules:\n  - rule_id: doubled\n    description: amount doubled\n    severity: medium\n    condition: step.input.amount * 2 > 100\n"), 0o644))
	r := troy(t, dir, "audit-batch", traces, "re.yaml", "--out-dir", "out")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "troy: rule errors: 1 rule could not be evaluated on")
	assert.Contains(t, r.stderr, "invalid operation: nil * int")
	assert.Contains(t, string(read(t, dir, "out/summary.md")), "## Rule errors")
	var b report.Batch
	require.NoError(t, json.Unmarshal(read(t, dir, "out/batch.json"), &b))
	require.Len(t, b.RuleErrors, 1)
	assert.Equal(t, "doubled", b.RuleErrors[0].RuleID)
	assert.Equal(t, 6, b.RuleErrors[0].Traces)
	r = troy(t, dir, "audit-batch", traces, "re.yaml", "--out-dir", "out2", "--fail-on-rule-error")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "--fail-on-rule-error")
}
