package troylc_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/callbacks"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms/fake"
	"github.com/tmc/langchaingo/tools"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/sdk/langchaingo"
)

var troyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "troylc")
	if err != nil {
		panic(err)
	}
	troyBin = filepath.Join(dir, "troy")
	build := exec.Command("go", "build", "-o", troyBin, "./cmd/troy")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "GOWORK=") // troy as its own module builds it
	if out, err := build.CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const policy = `policy_id: lc
rules:
  - rule_id: no-evil-math
    description: the calculator is asked about 666
    severity: high
    condition: step.name == 'calculator' and matches(text(step.input), '666')
`

// serve starts troy serve (embedded NATS) with the policy and returns its
// HTTP API's address and its reports folder.
func serve(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(policy), 0o644))
	cmd := exec.Command(troyBin, "serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--policy", "p.yaml",
		"--data-dir", "data", "--reports-dir", "reports", "--stream-idle", "1h")
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "http:" {
			go func() { // keep reading, so serve never blocks on its stdout
				for sc.Scan() {
				}
			}()
			return f[1], filepath.Join(dir, "reports")
		}
	}
	t.Fatal("troy serve printed no HTTP address")
	return "", ""
}

func run(t *testing.T, url, traceID, question string, answers ...string) (map[string]any, error, *troylc.Streamer) {
	t.Helper()
	g := &guard.HTTP{URL: url}
	s := &troylc.Streamer{URL: url, TraceID: traceID, Agent: "lc-agent"}
	calc := troylc.Guard(tools.Calculator{}, g, traceID, "lc-agent")
	calc.Metadata = func(context.Context, string, string) map[string]any { return map[string]any{"tenant": "acme"} }
	calc.Streamer = s
	llm := fake.NewFakeLLM(answers)
	a := agents.NewOneShotAgent(llm, []tools.Tool{calc}, agents.WithCallbacksHandler(s))
	ex := agents.NewExecutor(a, agents.WithCallbacksHandler(s))
	out, err := chains.Call(context.Background(), ex, map[string]any{"input": question}, chains.WithCallback(callbacks.Handler(s)))
	return out, err, s
}

// A langchaingo agent (its fake LLM) whose tool is behind troy: an allowed
// call runs and the run streams into troy's live audit; a call the policy
// blocks stops the agent with troy's error, and its finding and report are
// on the server.
func TestLangchaingoAgentBehindTroy(t *testing.T) {
	url, reports := serve(t)

	out, err, s := run(t, url, "lc-ok", "what is 2+2",
		"Thought: I should compute\nAction: calculator\nAction Input: 2+2", "Final Answer: 4")
	require.NoError(t, err)
	assert.Equal(t, "4", out["output"])
	assert.Empty(t, s.Close(context.Background()), "every step streamed")

	_, err, s = run(t, url, "lc-evil", "what is 666*2",
		"Thought: I should compute\nAction: calculator\nAction Input: 666*2", "Final Answer: 1332")
	var blocked *troylc.BlockedError
	require.ErrorAs(t, err, &blocked, "troy's refusal stops the agent")
	assert.Contains(t, err.Error(), "troy blocked calculator: rule no-evil-math (high)")
	assert.Empty(t, s.Close(context.Background()))

	require.Eventually(t, func() bool {
		b, err := os.ReadFile(findReport(reports, "lc-evil"))
		return err == nil && strings.Contains(string(b), "no-evil-math")
	}, 30*time.Second, 200*time.Millisecond, "the blocked run's report, with its finding")
	b, err := os.ReadFile(findReport(reports, "lc-ok"))
	require.NoError(t, err, "the clean run's report")
	assert.Contains(t, string(b), "calculator")
}

func findReport(root, traceID string) string {
	m, _ := filepath.Glob(filepath.Join(root, "*", traceID, "report.md"))
	if len(m) == 0 {
		return filepath.Join(root, "missing")
	}
	return m[0]
}
