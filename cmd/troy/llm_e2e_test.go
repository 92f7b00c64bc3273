package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/llm/llmtest"
	"github.com/troy-audit/troy/pkg/report"
)

const secretKey = "sk-test-e2e-NEVER-PRINT-ME-42"

// troy against a local chat-completions server: explanations come from the
// model, raw answers are kept, usage is reported, the key is never written,
// and a second audit of the same traces makes no call.
func TestAuditWithAnLLM(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	srv := llmtest.New(t, func(_ int, r llmtest.Request) llmtest.Response {
		if r.Authorization != "Bearer "+secretKey {
			return llmtest.Response{Status: 401, Body: `{"error": {"message": "bad key"}}`}
		}
		if r.ResponseFormat == nil {
			return llmtest.Response{Content: "A model-written summary."}
		}
		return llmtest.Response{Content: llmtest.StepJSON}
	})
	// the key comes from .env, the lowest precedence
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".env"), []byte("# test\nOPENAI_API_KEY=\""+secretKey+"\"\n"), 0o644))
	env := []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL=" + srv.BaseURL(), "TROY_MODEL="}

	r := troyEnv(t, dir, env, "audit-batch", traces, policy, "--out-dir", "out")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "explaining steps offline")
	calls := srv.Calls()
	assert.Equal(t, 26+6, calls, "one call per step (26) and one summary per trace (6)")

	var a report.Audit
	require.NoError(t, json.Unmarshal(read(t, dir, "out/support-bot-pii-exfil-001/audit.json"), &a))
	assert.Equal(t, "llm", a.ExplanationSource)
	assert.Equal(t, "A model-written summary.", a.Summary)
	assert.Equal(t, "to do its task", a.Explanations["s2"].Why)
	require.NotNil(t, a.LLMUsage)
	assert.Equal(t, 6, a.LLMUsage.Calls)
	assert.Equal(t, "gpt-4o-mini", a.LLMUsage.Model)
	assert.Positive(t, a.LLMUsage.CostUSD)
	assert.Equal(t, llmtest.StepJSON, string(read(t, dir, "out/support-bot-pii-exfil-001/llm_responses/step_s2.txt")))
	assert.Equal(t, "A model-written summary.", string(read(t, dir, "out/support-bot-pii-exfil-001/llm_responses/trace_summary.txt")))
	assert.Contains(t, string(read(t, dir, "out/summary.md")), "LLM explanations: gpt-4o-mini: 32 calls")
	assert.Contains(t, string(read(t, dir, "out/support-bot-pii-exfil-001/report.md")), "llm (gpt-4o-mini: 6 calls")

	r = troyEnv(t, dir, env, "audit-batch", traces, policy, "--out-dir", "again")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, calls, srv.Calls(), "the second audit is served from the cache")
	require.NoError(t, json.Unmarshal(read(t, dir, "again/support-bot-pii-exfil-001/audit.json"), &a))
	assert.Equal(t, 5, a.LLMUsage.CachedSteps)

	// the key appears nowhere troy wrote
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == ".env" || strings.Contains(path, ".troy-data") {
			return err
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.NotContains(t, string(b), secretKey, path)
		return nil
	}))
	assert.NotContains(t, r.stdout+r.stderr, secretKey)
}

func TestLLMUnreachableStillAudits(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	srv := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Status: 401, Body: `{"error": {"message": "invalid key ` + secretKey + `"}}`}
	})
	r := troyEnv(t, dir, []string{"OPENAI_API_KEY=" + secretKey, "OPENAI_BASE_URL=" + srv.BaseURL()},
		"audit", filepath.Join(traces, "raw_sql.json"), policy, "-j", "a.json", "-o", "r.md")
	require.Equal(t, 0, r.code, r.stderr)
	var a report.Audit
	require.NoError(t, json.Unmarshal(read(t, dir, "a.json"), &a))
	assert.Equal(t, "heuristic", a.ExplanationSource)
	require.NotEmpty(t, a.Warnings)
	assert.Contains(t, a.Warnings[0], "heuristic explanations because the LLM could not explain them")
	assert.Contains(t, string(read(t, dir, "r.md")), "## Warnings")
	assert.NotContains(t, string(read(t, dir, "a.json"))+string(read(t, dir, "r.md"))+r.stderr+r.stdout, secretKey)
	assert.Contains(t, string(read(t, dir, "a.json")), "[redacted]")
}

func TestNoLLMSaysSoOnce(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troyEnv(t, dir, []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL="}, "audit-batch", traces, policy, "--out-dir", "out")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "no LLM configured"), r.stderr)
}
