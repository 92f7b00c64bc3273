package main

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/llm/llmtest"
)

// No secret is written anywhere: troy serve with an LLM key (which a
// failing provider echoes back), HTTP tokens (a wrong one presented too),
// traces audited and a guard check made. Every byte troy wrote — its
// output, the reports, and the JetStream store itself (streams, buckets,
// dead letters, the ledger) — is searched for them.
func TestSecretsAreWrittenNowhere(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	llm := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Status: 401, Body: `{"error": {"message": "invalid key ` + secretKey + `"}}`}
	})
	r := troy(t, dir, "tokens", "add", "collector", "--scope", "ingest,guard", "--file", "tokens")
	require.Equal(t, 0, r.code, r.stderr)
	token := strings.TrimSpace(r.stdout)
	const wrongToken = "troy_presented-but-wrong-NEVER-PRINT-ME"

	cmd := exec.Command(troyBin, "serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--policy", policy, "--reports-dir", "reports", "--http-tokens", "tokens", "--log-level", "debug")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TROY_DATA_DIR="+filepath.Join(dir, "data"), "NATS_URL=",
		"OPENAI_API_KEY="+secretKey, "OPENAI_BASE_URL="+llm.BaseURL())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_, httpURL := readServeBanner(t, out, true)

	post := func(path, tok string, body []byte) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, httpURL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	files, err := filepath.Glob(filepath.Join(traces, "*.json"))
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, post("/v1/traces", token, b), f)
	}
	assert.Equal(t, http.StatusUnauthorized, post("/v1/traces", wrongToken, []byte(`{}`)))
	assert.Equal(t, http.StatusOK, post("/v1/guard/check", token, []byte(`{"action": {"name": "docs_search"}}`)))
	require.Eventually(t, func() bool {
		found, _ := filepath.Glob(filepath.Join(dir, "reports", "live", "*", "audit.json"))
		return len(found) == len(files)
	}, 60*time.Second, 100*time.Millisecond, "every trace reported")
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()

	written := stderr.String()
	storeSeesData := false // the sweep reads what the store holds, not nothing
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(path) == "tokens" {
			return err
		}
		b, err := os.ReadFile(path)
		if strings.HasPrefix(path, filepath.Join(dir, "data")) && bytes.Contains(b, []byte("support-bot-pii-exfil-001")) {
			storeSeesData = true
		}
		if err == nil && (bytes.Contains(b, []byte(secretKey)) || bytes.Contains(b, []byte(token)) || bytes.Contains(b, []byte(wrongToken))) {
			t.Errorf("a secret is written in %s", path)
		}
		return nil
	}))
	assert.True(t, storeSeesData, "the JetStream store's files hold the messages in clear")
	for _, s := range []string{secretKey, token, wrongToken} {
		assert.NotContains(t, written, s, "troy's log")
	}
	a, err := os.ReadFile(filepath.Join(dir, "reports", "live", "analytics-agent-sql-005", "audit.json"))
	require.NoError(t, err)
	assert.Contains(t, string(a), "[redacted]", "the provider's error, which held the key, is in the report without it")
}
