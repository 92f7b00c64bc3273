package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/llm/llmtest"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

// The README's agent example: offline, no key, no network, complete.
func TestAgentOfflineExample(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	r := troy(t, dir, "agent", "run", filepath.Join(root, "examples/agents/offline.yaml"),
		"Profile examples/data/sales.csv and name the top 3 regions", "--workspace", root, "--out-dir", "rep")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "[complete] Top 3 regions by revenue"), r.stdout)
	assert.Contains(t, r.stdout, "3 iterations")
	for _, want := range []string{"[1] plan: analyze_data for step s1", "[2] result ok", "East | 25312.5", "■ end: complete", "troy: audit: risk 0/100"} {
		assert.Contains(t, r.stderr, want)
	}
	md := string(read(t, dir, "rep/report.md"))
	assert.Contains(t, md, "| Agent | data-analyst |")

	r = troy(t, dir, "agent", "list", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list, 1)
	assert.Equal(t, "complete", list[0]["status"])
	run, session := list[0]["run_id"].(string), list[0]["session_id"].(string)

	// the run's audit, replayed by its id from the store the run left
	r = troy(t, dir, "replay", run, "--no-interactive")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "trace "+run+" · agent data-analyst")

	r = troy(t, dir, "agent", "show", run)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "# Run `"+run+"`")
	assert.Contains(t, r.stdout, "## Outcome: complete")
	assert.Contains(t, r.stdout, "*8 model calls (act 3, analyze 3, observe 2), 3 tool calls (100% ok), 0 blocked")

	r = troy(t, dir, "ledger", "verify", run)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, run+": ok, 4 records")
	assert.Contains(t, r.stderr, "the log was not checked against a signed checkpoint (give --pubkey for that)")
	r = troy(t, dir, "ledger", "verify", "nosuchrun")
	assert.Equal(t, 1, r.code, "a mistyped id does not verify")
	assert.Contains(t, r.stderr, "no ledger nosuchrun: it has no records")
	r = troy(t, dir, "ledger", "list")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "LEDGER "), r.stdout)
	assert.Contains(t, r.stdout, run)
	r = troy(t, dir, "ledger", "proof", "999")
	assert.Equal(t, 1, r.code)
	r = troy(t, dir, "ledger", "show", run)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"kind":"run_end"`)

	// A signed checkpoint, then the proof that the run's final record is in
	// the log, checked offline with the public key alone.
	shown := strings.Split(strings.TrimSpace(r.stdout), "\n")
	entry := strings.Fields(shown[len(shown)-1])[0]
	r = troy(t, dir, "ledger", "keygen", "--name", "e2e-log", "-o", "ledger.key")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger.pub"), []byte(r.stdout), 0o644))
	r = troy(t, dir, "ledger", "checkpoint", "--key", "ledger.key")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "ledger", "proof", entry)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "proof.json"), []byte(r.stdout), 0o644))
	r = troy(t, dir, "ledger", "verify-proof", "proof.json", "--pubkey", "ledger.pub")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "proof: ok, entry "+entry+" (ledger "+run+", seq 4, run_end) is in the log")
	var proof map[string]any
	require.NoError(t, json.Unmarshal(read(t, dir, "proof.json"), &proof))
	proof["entry"] = strings.Replace(proof["entry"].(string), `"status":"complete"`, `"status":"failed"`, 1)
	forged, _ := json.Marshal(proof)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "forged.json"), forged, 0o644))
	r = troy(t, dir, "ledger", "verify-proof", "forged.json", "--pubkey", "ledger.pub")
	assert.Equal(t, 2, r.code, "an edited record does not prove: %s", r.stdout)
	assert.Contains(t, r.stdout, "not_included")
	r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "ledger.pub")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "consistent with 1 checkpoint signed by e2e-log")

	r = troy(t, dir, "agent", "stats")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "model calls: 8 (100% ok")
	assert.Contains(t, r.stdout, "tool calls: 3 (100% ok)")

	r = troy(t, dir, "agent", "resume", session)
	assert.Equal(t, 2, r.code, "a complete session cannot be resumed: %s", r.stderr)
	assert.Contains(t, r.stderr, "ended complete: only running, cancelled, exhausted or failed sessions can be resumed")
	assert.NotContains(t, r.stderr, "troy: run ", "refused before a run starts")
}

func writeAgent(t *testing.T, dir, script string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(script), 0o644))
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("name: tester\nllm: {provider: scripted, script: script.yaml}\n"+
		"tools: [file_system, execute_code, submit]\naudit: {enabled: false}\nguardrails: {approver: {type: auto, ceiling: DANGER}}\n"), 0o644))
	return cfg
}

func plan(step, tool string) string {
	return `{"text": "<plan>{\"goal_restatement\": \"g\", \"steps\": [{\"id\": \"s1\", \"description\": \"work\"}, {\"id\": \"s2\", \"description\": \"answer\"}], ` +
		`\"next_action\": {\"step_id\": \"` + step + `\", \"tool\": \"` + tool + `\", \"rationale\": \"r\", \"success_criteria\": \"c\"}}</plan>"}`
}

const submitComplete = `{"tool_calls": [{"name": "submit", "arguments": {"answer": "done", "status": "complete", "confidence": 1}}]}`

func TestAgentExitCodes(t *testing.T) {
	dir := t.TempDir()
	cfg := writeAgent(t, dir, "responses: ["+plan("s2", "submit")+", "+submitComplete+"]\n")
	r := troy(t, dir, "agent", "run", cfg, "say done", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	for _, k := range []string{"status", "answer", "confidence", "evidence", "unmet_requirements", "iterations", "total_tokens", "cost_usd", "duration_s", "session_id", "run_id"} {
		assert.Contains(t, out, k)
	}
	assert.Equal(t, "complete", out["status"])

	// goal on stdin
	cmd := troyCmd(context.Background(), dir, "agent", "run", cfg)
	cmd.Stdin = strings.NewReader("  say done  \n")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	assert.Contains(t, string(b), "[complete] done")

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"agent", "run", filepath.Join(dir, "missing.yaml"), "g"}, "not found"},
		{[]string{"agent", "run", filepath.Join(dir, "a.toml"), "g"}, "unrecognized config extension"},
		{[]string{"agent", "run", cfg, "   "}, "the goal is empty"},
		{[]string{"agent", "run"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"agent", "run", cfg, "g", "--no-such-flag"}, "unknown flag"},
		{[]string{"agent", "resume", "nosuchsession"}, "no session nosuchsession"},
	}
	for _, c := range cases {
		cmd := troyCmd(context.Background(), dir, c.args...)
		cmd.Stdin = strings.NewReader("")
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", c.args, b)
		assert.Equal(t, 2, ee.ExitCode(), "%v: %s", c.args, b)
		assert.Contains(t, string(b), c.want, c.args)
	}
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\nllm: {provider: scripted, script: script.yaml}\nbudgt: {}\n"), 0o644))
	r = troy(t, dir, "agent", "run", bad, "g")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "budgt: unknown key; allowed: name, llm")

	// A run that does not end complete exits 1: the script runs out.
	cfg = writeAgent(t, dir, "responses: ["+plan("s1", "file_system")+"]\n")
	r = troy(t, dir, "agent", "run", cfg, "g")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stdout, "[failed] The model provider failed during act")
}

// interruptAt runs troy, sends it SIGINT `signals` times (200 ms apart) once
// its stderr shows line (and, when file is named, once the file exists in
// dir: a call is really running only then), and returns how it ended.
func interruptAt(t *testing.T, dir, line, file string, signals int, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := troyCmd(context.Background(), dir, args...)
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	var out, errb strings.Builder
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		errb.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), line) {
			if file != "" {
				require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, file)); return err == nil }, 20*time.Second, 10*time.Millisecond)
			}
			for i := range signals {
				if i > 0 {
					time.Sleep(200 * time.Millisecond)
				}
				require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			}
			break
		}
	}
	for sc.Scan() {
		errb.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout: %s\nstderr: %s", out.String(), errb.String())
	return ee.ExitCode(), out.String(), errb.String()
}

// The first Ctrl-C cancels at the next checkpoint and still prints a
// result; the session then resumes to the end.
func TestAgentCtrlCThenResume(t *testing.T) {
	dir := t.TempDir()
	cfg := writeAgent(t, dir, "responses: ["+plan("s1", "execute_code")+`, {"tool_calls": [{"name": "execute_code", "arguments": {"language": "bash", "code": "touch started.txt; sleep 2; echo >> ran.txt"}}]}]`+"\n")
	code, stdout, stderr := interruptAt(t, dir, "[1] call execute_code", "started.txt", 1, "agent", "run", cfg, "work then answer")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cancelling at the next checkpoint")
	assert.Contains(t, stdout, "[cancelled] Run cancelled: interrupted (Ctrl-C)")
	assert.FileExists(t, filepath.Join(dir, "ran.txt"), "the call in flight finished")
	session := strings.TrimPrefix(strings.Fields(stdout[strings.Index(stdout, "session="):])[0], "session=")

	// The resumed session re-reads its config: the script goes on from here.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.yaml"), []byte("responses: ["+plan("s2", "submit")+", "+submitComplete+"]\n"), 0o644))
	r := troy(t, dir, "agent", "resume", session)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "[complete] done")
	assert.Contains(t, r.stdout, "2 iterations", "numbering goes on")
	assert.Contains(t, r.stderr, "(resumed)")

	// A second Ctrl-C stops at once, still with a result.
	cfg = writeAgent(t, dir, "responses: ["+plan("s1", "execute_code")+`, {"tool_calls": [{"name": "execute_code", "arguments": {"language": "bash", "code": "touch sleeping.txt; sleep 30"}}]}]`+"\n")
	start := time.Now()
	code, stdout, _ = interruptAt(t, dir, "[1] call execute_code", "sleeping.txt", 2, "agent", "run", cfg, "sleep")
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(start), 15*time.Second, "the 30 s sleep was killed")
	assert.Contains(t, stdout, "[cancelled]")
}

// troy agent run --nats-url queues the run for troy serve's agent-runner
// and follows it over the bus; Ctrl-C cancels it there.
func TestAgentRunOnAServer(t *testing.T) {
	dir := t.TempDir()
	natsURL, _ := serveEmbedded(t, dir)

	cfg := writeAgent(t, dir, "responses: ["+plan("s2", "submit")+", "+submitComplete+"]\n")
	r := troy(t, dir, "agent", "run", cfg, "say done", "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "[complete] done")
	assert.Contains(t, r.stderr, "[1] plan: submit for step s2", "the console follows the events on the bus")
	run := strings.TrimPrefix(strings.Fields(r.stdout[strings.Index(r.stdout, "run="):])[0], "run=")
	session := strings.TrimPrefix(strings.Fields(r.stdout[strings.Index(r.stdout, "session="):])[0], "session=")

	r = troy(t, dir, "agent", "show", run, "--follow", "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "## Outcome: complete")
	r = troy(t, dir, "agent", "list", "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, run)
	// a finished session is refused before anything is queued
	r = troy(t, dir, "agent", "resume", session, "--nats-url", natsURL)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "session "+session+" ended complete: only running, cancelled, exhausted or failed sessions can be resumed")
	assert.NotContains(t, r.stderr, "troy: run ", "no run was started")
	// an audited run, replayed by its id from the bus
	_, policy := examples(t)
	raw, err := os.ReadFile(cfg)
	require.NoError(t, err)
	audited := filepath.Join(dir, "audited.yaml")
	require.NoError(t, os.WriteFile(audited, []byte(strings.Replace(string(raw), "audit: {enabled: false}", "audit: {policy: "+policy+"}", 1)), 0o644))
	r = troy(t, dir, "agent", "run", audited, "say done", "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	run = strings.TrimPrefix(strings.Fields(r.stdout[strings.Index(r.stdout, "run="):])[0], "run=")
	require.Eventually(t, func() bool {
		r = troy(t, dir, "replay", run, "--no-interactive", "--nats-url", natsURL)
		return r.code == 0
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "trace "+run+" · agent ")
	r = troy(t, dir, "replay", "no-such-run", "--no-interactive", "--nats-url", natsURL)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no audit report of run no-such-run")

	cfg = writeAgent(t, dir, "responses: ["+plan("s1", "execute_code")+`, {"tool_calls": [{"name": "execute_code", "arguments": {"language": "bash", "code": "sleep 2"}}]}]`+"\n")
	code, stdout, _ := interruptAt(t, dir, "[1] call execute_code", "", 1, "agent", "run", cfg, "sleep", "--nats-url", natsURL)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "[cancelled] Run cancelled: interrupted (Ctrl-C)")
}

// Two agent-runner processes share the queue; the one running a request is
// killed (SIGKILL) in the middle of a model call, and the other goes on
// with the same run and session once the request is redelivered.
func TestAgentRunnerKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a redelivery")
	}
	blocked := make(chan struct{})
	var once sync.Once
	responses := []llmtest.Response{
		{Content: llmPlan("s1", "file_system")},
		{}, // ACT of the first runner: it is killed while waiting
		{Content: llmPlan("s1", "file_system")},
		{ToolCalls: [][2]string{{"file_system", `{"operation":"write","path":"f.txt","content":"hi"}`}}},
		{Content: `<evaluation>{"outcome": "success", "evidence": "Wrote 2 characters to f.txt", "completed_step_ids": ["s1"], "goal_status": "in_progress", "next_step": "answer"}</evaluation>`},
		{Content: llmPlan("s2", "submit")},
		{ToolCalls: [][2]string{{"submit", `{"answer":"wrote f.txt","status":"complete","confidence":1}`}}},
	}
	llm := llmtest.New(t, func(call int, _ llmtest.Request) llmtest.Response {
		if call == 2 {
			once.Do(func() { close(blocked) })
			return llmtest.Response{Delay: time.Minute, Content: "too late"}
		}
		return responses[min(call, len(responses))-1]
	})
	srv := bustest.RunServer(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	require.NoError(t, os.MkdirAll(ws, 0o755))
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`name: writer
llm: {provider: openai, model: gpt-4o-mini, base_url: "`+llm.BaseURL()+`", api_key: test, max_retries: 0}
tools: [file_system, submit]
audit: {enabled: false}
`), 0o644))
	first, _ := serveTarget(t, dir, srv.URL, "agent-runner")

	cmd := troyCmd(context.Background(), dir, "agent", "run", cfg, "write hi to f.txt", "--workspace", ws, "--nats-url", srv.URL)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the first runner never reached ACT: %s", stderr.String())
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	serveTarget(t, dir, srv.URL, "agent-runner")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no result within 60s: %s", stderr.String())
	}
	assert.Contains(t, stdout.String(), "[complete] wrote f.txt")
	assert.Contains(t, stdout.String(), "3 iterations", "iteration 1 was cut short; the second runner ran 2 and 3")
	assert.Contains(t, stderr.String(), "(resumed)")
	b, err := os.ReadFile(filepath.Join(ws, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(b))
}

func llmPlan(step, tool string) string {
	b, _ := json.Marshal(map[string]any{"goal_restatement": "write a file, then answer",
		"steps":       []map[string]any{{"id": "s1", "description": "write"}, {"id": "s2", "description": "answer"}},
		"next_action": map[string]any{"step_id": step, "tool": tool, "rationale": "because " + step, "success_criteria": "it is done"}})
	return "<plan>" + string(b) + "</plan>"
}

// A DANGER call waits on the bus for a person: approved from another
// process with troy approvals, it runs; denied over HTTP, it does not.
func TestAgentApprovalOverNATS(t *testing.T) {
	dir := t.TempDir()
	natsURL, httpURL := serveEmbedded(t, dir)

	script := "responses: [" + plan("s1", "execute_code") + `, {"tool_calls": [{"name": "execute_code", "arguments": {"language": "bash", "code": "echo ran > ran.txt"}}]}, ` +
		`{"text": "<evaluation>{\"outcome\": \"partial\", \"evidence\": \"the command ran or was refused\", \"completed_step_ids\": [], \"goal_status\": \"in_progress\", \"next_step\": \"answer\"}</evaluation>"}, ` +
		plan("s2", "submit") + ", " + submitComplete + "]\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(script), 0o644))
	cfg := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("name: tester\nllm: {provider: scripted, script: script.yaml}\n"+
		"tools: [execute_code, submit]\naudit: {enabled: false}\nguardrails: {approver: {type: nats, timeout_s: 60}}\n"), 0o644))

	decide := func(approve bool) (code int, stdout string) {
		cmd := troyCmd(context.Background(), dir, "agent", "run", cfg, "run the command", "--nats-url", natsURL)
		var so, se lockedBuffer
		cmd.Stdout, cmd.Stderr = &so, &se
		require.NoError(t, cmd.Start())
		var id string
		require.Eventually(t, func() bool {
			r := troy(t, dir, "approvals", "list", "--json", "--nats-url", natsURL)
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				var a map[string]any
				if json.Unmarshal([]byte(line), &a) == nil && a["status"] == "pending" {
					id = a["id"].(string)
					return true
				}
			}
			return false
		}, 30*time.Second, 200*time.Millisecond, "the call waits for a person: %s", se.String())
		if approve {
			r := troy(t, dir, "approvals", "approve", id, "--by", "ann", "--nats-url", natsURL)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Contains(t, r.stdout, "approved by ann")
		} else {
			resp, err := http.Post(httpURL+"/v1/approvals/"+id, "application/json", strings.NewReader(`{"approved": false, "reason": "not today", "by": "bob"}`))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		err := cmd.Wait()
		code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		assert.Contains(t, se.String(), "approval needed: DANGER call to execute_code")
		return code, so.String()
	}
	code, stdout := decide(true)
	assert.Equal(t, 0, code, stdout)
	assert.FileExists(t, filepath.Join(dir, "ran.txt"))

	require.NoError(t, os.Remove(filepath.Join(dir, "ran.txt")))
	code, _ = decide(false)
	assert.Equal(t, 0, code, "the scripted model submits complete either way")
	assert.NoFileExists(t, filepath.Join(dir, "ran.txt"), "a denied call never runs")
}

// lockedBuffer is written by a process's output copier and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The README's governed example: a credential read is blocked before any
// approver, the DANGER delete is denied without a terminal, the report stays.
func TestAgentGuardedExample(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ws := t.TempDir()
	r := troy(t, dir, "agent", "run", filepath.Join(root, "examples/agents/guarded.yaml"), "Write a status report, then clean up", "--workspace", ws)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "blocked execute_code: matched EXF008")
	assert.Contains(t, r.stderr, "approval needed: DANGER call to file_system")
	assert.Contains(t, r.stderr, "denied by policy")
	assert.FileExists(t, filepath.Join(ws, "report.md"), "the denied delete did not happen")
}

// A run's ledger verifies, chain and log, against a checkpoint signed with
// troy ledger keygen's key; a checkpoint signed with another key does not.
func TestLedgerCheckpointEndToEnd(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	r := troy(t, dir, "ledger", "keygen", "--name", "e2e", "-o", "key")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pub"), []byte(r.stdout), 0o644))
	r = troy(t, dir, "agent", "run", filepath.Join(root, "examples/agents/offline.yaml"), "Profile examples/data/sales.csv", "--workspace", root)
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "ledger", "checkpoint", "--key", "key")
	require.Equal(t, 0, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "troy-ledger/e2e\n4\n"), r.stdout)
	r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "pub")
	require.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "log: ok, 4 entries, consistent with 1 checkpoint signed by e2e (the newest covers 4)")

	r = troy(t, dir, "ledger", "keygen", "--name", "e2e", "-o", "other")
	require.Equal(t, 0, r.code)
	r = troy(t, dir, "ledger", "checkpoint", "--key", "other")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "pub")
	assert.Equal(t, 0, r.code, "a checkpoint another key signed is ignored, and said so: %s", r.stdout)
	assert.Contains(t, r.stderr, "1 stored checkpoint is not signed by e2e and ignored")
	r = troy(t, dir, "ledger", "checkpoint", "export")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "foreign.checkpoint"), []byte(r.stdout), 0o644))
	r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "pub", "--checkpoint", "foreign.checkpoint")
	assert.Equal(t, 2, r.code, "checked against it alone, it is a fault: %s", r.stdout)
	assert.Contains(t, r.stdout, "bad_signature")
}

// serveEmbedded starts `troy serve` with every target on its own embedded
// server (data in dir) and returns its NATS and HTTP addresses.
func serveEmbedded(t *testing.T, dir string) (natsURL, httpURL string) {
	t.Helper()
	serve := exec.Command(troyBin, "serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json")
	serve.Dir = dir
	serve.Env = append(os.Environ(), "TROY_DATA_DIR="+filepath.Join(dir, "serve-data"), "NATS_URL=")
	out, err := serve.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Signal(syscall.SIGTERM); _ = serve.Wait() })
	return readServeBanner(t, out, true)
}

// What a config names on disk is checked all at once, before a run starts
// (it used to take four runs, the last after a run id was printed).
func TestAgentConfigPathsCheckedAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "a.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("name: x\nllm: {provider: scripted, script: nope.yaml}\nskills: {dirs: [noskills]}\nworkspace: ./scratch\naudit: {policy: soc3}\n"), 0o644))
	r := troy(t, dir, "agent", "run", cfg, "hi")
	assert.Equal(t, 2, r.code)
	for _, want := range []string{"skills.dirs[0]: ", "llm.script: ", "workspace: ", "audit.policy: "} {
		assert.Contains(t, r.stderr, want)
	}
	assert.NotContains(t, r.stderr, "troy: run ", "no run started")
}
