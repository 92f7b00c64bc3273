// End-to-end tests of the built binary: real processes, real files, an
// embedded or standalone JetStream server.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/tracegen"
)

var troyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "troy-e2e")
	if err != nil {
		panic(err)
	}
	troyBin = filepath.Join(dir, "troy")
	build := exec.Command("go", "build", "-o", troyBin, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build troy:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// troy runs the binary in dir with its own data dir and returns what it printed.
func troy(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return troyEnv(t, dir, []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL="}, args...)
}

// troyCmd is troy run in dir on its own embedded NATS (data in dir), not
// started.
func troyCmd(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, troyBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TROY_DATA_DIR="+filepath.Join(dir, ".troy-data"), "NATS_URL=")
	return cmd
}

// troyEnv is troy with extra environment (later entries win).
func troyEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := troyCmd(ctx, dir, args...)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func examples(t *testing.T) (traces, policy string) {
	t.Helper()
	root, err := filepath.Abs("../../examples")
	require.NoError(t, err)
	return filepath.Join(root, "traces"), filepath.Join(root, "policy.yaml")
}

func TestAuditOneTraceAndExitCodes(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	pii := filepath.Join(traces, "support_bot.json")

	r := troy(t, dir, "audit", pii, policy, "-o", "out/r.md", "-j", "out/a.json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "support-bot-pii-exfil-001: risk 70/100, violations: 1 critical, 1 high")
	var a report.Audit
	require.NoError(t, json.Unmarshal(read(t, dir, "out/a.json"), &a))
	assert.Equal(t, "troy-examples", a.PolicyID)
	assert.Len(t, a.Violations, 2)
	assert.Contains(t, string(read(t, dir, "out/r.md")), "pii-exfiltration")

	r = troy(t, dir, "audit", pii, policy, "--fail-on", "critical")
	assert.Equal(t, 2, r.code, "a critical violation with --fail-on critical")
	assert.Contains(t, r.stderr, "violations at or above critical")
	day := filepath.Join(dir, "logs", time.Now().Format("2006-01-02"))
	_, err := os.Stat(filepath.Join(day, "support-bot-pii-exfil-001", "report.md"))
	assert.NoError(t, err, "default output goes to logs/<date>/<trace_id>/")
	r = troy(t, dir, "audit", filepath.Join(traces, "raw_sql.json"), policy)
	require.Equal(t, 0, r.code, r.stderr)
	for _, id := range []string{"support-bot-pii-exfil-001", "analytics-agent-sql-005"} {
		_, err := os.Stat(filepath.Join(day, id, "audit.json"))
		assert.NoError(t, err, "a second audit the same day keeps the first: %s", id)
	}

	r = troy(t, dir, "audit", filepath.Join(traces, "clean_run.json"), policy, "--fail-on", "low", "--json")
	assert.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &a), "--json prints audit.json on stdout")
	assert.Empty(t, a.Violations)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{\"trace_id\": \"b\",\n \"steps\": [}"), 0o644))
	r = troy(t, dir, "audit", bad, policy)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "bad.json: bad JSON at line 2, column 12")
	assert.Empty(t, r.stdout, "errors go to stderr")

	badPolicy := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(badPolicy, []byte("policy_id: p\nrules:\n  - rule_id: r1\n    condition: step.type ==\n"), 0o644))
	r = troy(t, dir, "audit", pii, badPolicy)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `rule "r1" condition (line 1, column`)

	r = troy(t, dir, "audit", pii)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "accepts 2 arg(s)")
	r = troy(t, dir, "audit", pii, policy, "--fail-on", "severe")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `--fail-on "severe": want one of critical, high, medium, low`)
}

func TestAuditBatchReportsEveryInputAndRejectsBadOnes(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	require.NoError(t, os.CopyFS(in, os.DirFS(traces)))
	jsonl := `{"trace_id":"l1","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}` + "\n\n" +
		`{"trace_id":"l2","agent_name":"a","steps":[{"step_id":"1","type":"teleport"}]}` + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(in, "more.jsonl"), []byte(jsonl), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(in, "notes.txt"), []byte("ignored"), 0o644))

	r := troy(t, dir, "audit-batch", "in", policy, "--out-dir", "out", "--junit", "troy.xml", "--sarif", "troy.sarif")
	assert.Equal(t, 1, r.code, "a rejected input makes the exit code 1")
	// for CI: every input in the JUnit file, the rejected one as an error;
	// the violations in the SARIF log at their files
	junit := string(read(t, dir, "troy.xml"))
	assert.Equal(t, 8, strings.Count(junit, "<testsuite "), "a suite per input")
	assert.Contains(t, junit, `<testsuite name="l2" tests="1" failures="0" errors="1">`)
	assert.Contains(t, junit, `<failure type="critical" message=`)
	sarif := string(read(t, dir, "troy.sarif"))
	assert.Contains(t, sarif, `"uri": "in/support_bot.json"`)
	assert.Contains(t, sarif, `more.jsonl:3 was not audited`)
	assert.Contains(t, r.stdout, "8 traces: 7 audited, 1 rejected")
	assert.Contains(t, r.stderr, `rejected more.jsonl:3: steps[0].type: "teleport" is not one of`)

	var b report.Batch
	require.NoError(t, json.Unmarshal(read(t, dir, "out/batch.json"), &b))
	assert.Equal(t, 8, b.Traces)
	assert.Equal(t, 7, b.Audited)
	for _, e := range b.Entries {
		if e.Status == report.StatusAudited {
			_, err := os.Stat(filepath.Join(dir, "out", e.TraceID, "audit.json"))
			assert.NoError(t, err, e.TraceID)
			_, err = os.Stat(filepath.Join(dir, "out", e.TraceID, "report.md"))
			assert.NoError(t, err, e.TraceID)
		}
	}
	summary := string(read(t, dir, "out/summary.md"))
	assert.Contains(t, summary, "| l2 | — | — | — | — | — | — | rejected (more.jsonl:3)")
	assert.Contains(t, summary, "[support-bot-pii-exfil-001](support-bot-pii-exfil-001/report.md) | 5 | 1 | 1 | 0 | 0 | 70 | audited |")
	_, err := os.Stat(filepath.Join(dir, "out", auditor.StateFile))
	assert.True(t, os.IsNotExist(err), "a finished batch leaves no resume state")

	r = troy(t, dir, "audit-batch", traces, policy, "--out-dir", "clean", "--fail-on", "high")
	assert.Equal(t, 2, r.code)
	r = troy(t, dir, "audit-batch", filepath.Join(dir, "missing"), policy)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "read trace folder")
}

// TestCrashMidBatchThenRerun kills troy (SIGKILL) in the middle of a
// 1,000-trace batch; the same command run again finishes the batch with
// exactly one report per trace.
func TestCrashMidBatchThenRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	_, policy := examples(t)
	dir := t.TempDir()
	const n = 1000
	require.NoError(t, tracegen.WriteDir(filepath.Join(dir, "in"), 7, n, 20))

	cmd := troyCmd(context.Background(), dir, "audit-batch", "in", policy, "--out-dir", "out", "--concurrency", "64")
	require.NoError(t, cmd.Start())
	// Kill once a fair share of reports are written, but long before the end.
	require.Eventually(t, func() bool { return countReports(t, filepath.Join(dir, "out")) >= 100 }, time.Minute, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	before := countReports(t, filepath.Join(dir, "out"))
	require.Less(t, before, n, "the kill came mid-batch")
	_, err := os.Stat(filepath.Join(dir, "out", auditor.StateFile))
	require.NoError(t, err, "the interrupted run left its resume state")

	r := troy(t, dir, "audit-batch", "in", policy, "--out-dir", "out", "--concurrency", "64")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "resuming interrupted run")
	assert.Equal(t, n, countReports(t, filepath.Join(dir, "out")))

	var b report.Batch
	require.NoError(t, json.Unmarshal(read(t, dir, "out/batch.json"), &b))
	assert.Equal(t, n, b.Audited)
	seen := map[string]bool{}
	for _, e := range b.Entries {
		assert.False(t, seen[e.TraceID], "one entry per trace: %s", e.TraceID)
		seen[e.TraceID] = true
		var a report.Audit
		require.NoError(t, json.Unmarshal(read(t, dir, filepath.Join("out", e.TraceID, "audit.json")), &a), e.TraceID)
		assert.Len(t, a.Trace.Steps, 20)
	}
	assert.Len(t, seen, n)
}

// TestInterruptThenResume stops a batch with SIGINT: troy exits 1 saying how
// to resume, and the same command finishes the batch.
func TestInterruptThenResume(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	_, policy := examples(t)
	dir := t.TempDir()
	const n = 600
	require.NoError(t, tracegen.WriteDir(filepath.Join(dir, "in"), 11, n, 10))
	cmd := troyCmd(context.Background(), dir, "audit-batch", "in", policy, "--out-dir", "out", "--concurrency", "32")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return countReports(t, filepath.Join(dir, "out")) >= 50 }, time.Minute, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "interrupted run exits non-zero; stderr: %s", stderr.String())
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, stderr.String(), "interrupted: run the same command again to resume")

	r := troy(t, dir, "audit-batch", "in", policy, "--out-dir", "out")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("%d traces: %d audited, 0 rejected", n, n))
	assert.Equal(t, n, countReports(t, filepath.Join(dir, "out")))
}

func countReports(t *testing.T, dir string) int {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "report.md")); err == nil {
				n++
			}
		}
	}
	return n
}

// TestServeThenAuditOverNATS runs `troy serve` (embedded NATS on a random
// port), audits through it with --nats-url, checks health, readiness and
// metrics, and stops it with SIGTERM.
func TestServeThenAuditOverNATS(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "ledger", "keygen", "--name", "serve-e2e", "-o", "ledger.key")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger.pub"), []byte(r.stdout), 0o644))
	serve := exec.Command(troyBin, "serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--policy", policy, "--reports-dir", "live-reports", "--checkpoint-interval", "100ms")
	serve.Dir = dir
	serve.Env = append(os.Environ(), "TROY_DATA_DIR="+filepath.Join(dir, "serve-data"), "NATS_URL=", "TROY_LEDGER_KEY=ledger.key")
	stdout, err := serve.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill() })

	natsURL, httpURL := readServeBanner(t, stdout, true)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		body, code := get(t, httpURL+path)
		assert.Equal(t, http.StatusOK, code, path)
		assert.Contains(t, body, want)
	}

	r = troy(t, dir, "audit-batch", traces, policy, "--out-dir", "remote", "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "audit-batch", traces, policy, "--out-dir", "local")
	require.Equal(t, 0, r.code, r.stderr)
	for _, id := range []string{"support-bot-pii-exfil-001", "docs-helper-clean-006", "analytics-agent-sql-005"} {
		assert.Equal(t, withoutTime(t, read(t, dir, "local/"+id+"/audit.json")), withoutTime(t, read(t, dir, "remote/"+id+"/audit.json")),
			"embedded and remote NATS give the same audit for %s", id)
	}

	// A trace streamed in over HTTP is audited with serve's --policy.
	resp, err := http.Post(httpURL+"/v1/traces", "application/json", bytes.NewReader(read(t, traces, "raw_sql.json")))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	live := filepath.Join(dir, "live-reports", "live", "analytics-agent-sql-005", "audit.json")
	require.Eventually(t, func() bool { _, err := os.Stat(live); return err == nil }, 30*time.Second, 20*time.Millisecond)
	var a report.Audit
	require.Eventually(t, func() bool {
		return json.Unmarshal(read(t, dir, "live-reports/live/analytics-agent-sql-005/audit.json"), &a) == nil
	},
		10*time.Second, 20*time.Millisecond, "the file is complete")
	assert.Len(t, a.Violations, 3)

	// A trace streamed over HTTP step by step, then ended, is reported too.
	for _, body := range []string{
		`{"step_id": "1", "type": "tool_call", "name": "crm", "metadata": {"data_classification": "pii"}}`,
		`[{"step_id": "2", "type": "tool_call", "name": "http_post", "metadata": {"network_zone": "external"}}]`,
	} {
		resp, err := http.Post(httpURL+"/v1/traces/stream-e2e/steps?agent=live-bot", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	resp, err = http.Post(httpURL+"/v1/traces/bad%20id/steps", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, err = http.Post(httpURL+"/v1/traces/stream-e2e/end", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	streamed := filepath.Join(dir, "live-reports", "live", "stream-e2e", "audit.json")
	require.Eventually(t, func() bool { _, err := os.Stat(streamed); return err == nil }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, json.Unmarshal(read(t, dir, "live-reports/live/stream-e2e/audit.json"), &a))
	assert.Equal(t, "live-bot", a.Trace.AgentName)
	assert.Len(t, a.Violations, 2)

	// The guard answers over HTTP and NATS, with serve's --policy, and
	// remembers the session between the two.
	hg := &guard.HTTP{URL: httpURL}
	d, err := hg.Check(context.Background(), guard.Request{SessionID: "e2e", Action: guard.Action{Name: "crm_lookup",
		Metadata: map[string]any{"data_classification": "pii"}}})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision, d.Reason)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	d, err = (&guard.NATS{Conn: nc}).Check(context.Background(), guard.Request{SessionID: "e2e", Action: guard.Action{Name: "http_post",
		Metadata: map[string]any{"network_zone": "external"}}})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision, d.Reason)
	assert.Equal(t, "troy-examples", d.PolicyID)

	// Each decision the guard gave, and one checked in process with
	// --ledger, is in the decision ledger, and every chain holds.
	r = troy(t, dir, "check", policy, "-a", "docs_search", "--ledger", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r = troy(t, dir, "ledger", "list", "--nats-url", natsURL)
		return regexp.MustCompile(`(?m)^guard\.\S+ +2$`).MatchString(r.stdout) && regexp.MustCompile(`(?m)^reporter\.\S+ +8$`).MatchString(r.stdout)
	}, 10*time.Second, 100*time.Millisecond, "the guard's two decisions are recorded, and every audit the reporter finished (8 traces): %s", r.stdout)
	assert.Regexp(t, `(?m)^check\.\S+ +1$`, r.stdout)
	// The checkpointer signs the whole log (11 entries) within its interval.
	require.Eventually(t, func() bool {
		r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "ledger.pub", "--nats-url", natsURL)
		return r.code == 0 && strings.Contains(r.stdout, "the newest covers 11)")
	}, 10*time.Second, 100*time.Millisecond, "every chain holds and the newest checkpoint covers the log: %s", r.stdout)

	// Findings for SIEMs: replayed with --since, filtered by severity.
	// 4 critical from the batch through serve, 1 from the trace posted over
	// HTTP, 1 from the streamed one
	r = troy(t, dir, "violations", "tail", "--nats-url", natsURL, "--since", "1h", "--severity", "critical", "--limit", "6", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6)
	for _, l := range lines {
		var f map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &f))
		assert.Equal(t, float64(5), f["severity_id"])
	}
	r = troy(t, dir, "violations", "tail", "--nats-url", natsURL, "--since", "1h", "--rule", "raw-sql", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Medium   raw-sql trace=analytics-agent-sql-005 step=q2")

	metrics, _ := get(t, httpURL+"/metrics")
	assert.Regexp(t, `troy_stage_messages_total\{outcome="ok",stage="reporter"\} 16`, metrics)

	require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		assert.NoError(t, err, "clean exit on SIGTERM; stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("troy serve did not stop within 30s of SIGTERM")
	}
	assert.Contains(t, stderr.String(), `"message":"stopped"`)
}

// TestServeTargetsAgainstACluster runs the pipeline as two `troy serve
// --target` processes against a standalone NATS server, the way a cluster
// deployment does, and audits through them.
func TestServeTargetsAgainstACluster(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	srv := bustest.RunServer(t)
	for _, targets := range []string{"ingest,graph,evaluator", "explainer,scorer,reporter"} {
		serveTarget(t, dir, srv.URL, targets)
	}
	r := troy(t, dir, "audit-batch", traces, policy, "--out-dir", "out", "--nats-url", srv.URL, "--fail-on", "critical")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stdout, "6 traces: 6 audited, 0 rejected")

	r = troy(t, dir, "serve", "--target", "evaluatr")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `--target "evaluatr": want all or one or more of ingest, graph, evaluator, explainer, scorer, reporter, streamer, guard, checkpointer, agent-runner, splunk, syslog`)
}

var bannerNATS = regexp.MustCompile(`nats: (nats://\S+)`)
var bannerHTTP = regexp.MustCompile(`http: (https?://\S+)`)

// serveTarget starts `troy serve --target targets` against the NATS server
// at url, with no LLM configured, stopped (SIGTERM) when the test ends. It
// returns the process and its HTTP address.
func serveTarget(t *testing.T, dir, url, targets string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(troyBin, append([]string{"serve", "--target", targets, "--nats-url", url, "--http-addr", "127.0.0.1:0",
		"--log-format", "json"}, extra...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "serve --target %s", targets)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	_, httpURL := readServeBanner(t, out, false)
	return cmd, httpURL
}

func readServeBanner(t *testing.T, r io.Reader, embedded bool) (natsURL, httpURL string) {
	t.Helper()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	for (embedded && natsURL == "") || httpURL == "" {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "troy serve exited before printing its addresses")
			if m := bannerNATS.FindStringSubmatch(l); m != nil {
				natsURL = m[1]
			}
			if m := bannerHTTP.FindStringSubmatch(l); m != nil {
				httpURL = m[1]
			}
		case <-deadline:
			t.Fatal("troy serve printed no addresses within 30s")
		}
	}
	go func() {
		for range lines {
		}
	}()
	return natsURL, httpURL
}

func get(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b), resp.StatusCode
}

func read(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return b
}

func withoutTime(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	delete(m, "generated_at")
	return m
}
