package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
)

// startServe runs `troy serve` in dir with reports in dir/reports/root and
// returns its NATS and HTTP URLs.
func startServe(t *testing.T, dir string, extra ...string) (natsURL, httpURL string) {
	t.Helper()
	_, policy := examples(t)
	args := append([]string{"serve", "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--policy", policy, "--reports-dir", filepath.Join("reports", "root")}, extra...)
	serve := exec.Command(troyBin, args...)
	serve.Dir = dir
	serve.Env = append(os.Environ(), "TROY_DATA_DIR="+filepath.Join(dir, "serve-data"), "NATS_URL=")
	stdout, err := serve.StdoutPipe()
	require.NoError(t, err)
	serve.Stderr = io.Discard
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	return readServeBanner(t, stdout, true)
}

// publishForDeadLetter publishes data on subject through JetStream and
// returns the dead letter a stage makes of it.
func publishForDeadLetter(t *testing.T, natsURL, subject string, data []byte) *nats.Msg {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	dlq, err := nc.SubscribeSync(bus.Wildcard(bus.StageDLQ))
	require.NoError(t, err)
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.Publish(subject, data)
	require.NoError(t, err)
	dead, err := dlq.NextMsg(30 * time.Second)
	require.NoError(t, err, "no dead letter for %s", subject)
	return dead
}

// escaped lists what exists under dir outside reports/root and the data dir.
func escaped(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.Contains(p, "escaped") {
			out = append(out, p)
		}
		return nil
	}))
	return out
}

// The three reproductions of the path traversal: a chat-format trace over
// HTTP, a canonical trace published straight to troy.trace.<run> (past
// ingest), and a chat log in a batch. None writes outside its folder; each
// says why it was refused.
func TestTraceIDsCannotLeaveTheReportsFolder(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "a", "b")
	require.NoError(t, os.MkdirAll(work, 0o755))
	natsURL, httpURL := startServe(t, work)

	resp, err := http.Post(httpURL+"/v1/traces", "application/json", strings.NewReader(
		`{"id":"../../escaped-http/pwned","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "a trace id is one name, not a path")

	dead := publishForDeadLetter(t, natsURL, bus.Subject(bus.StageTrace, "live"),
		[]byte(`{"trace_id":"../../escaped-nats/pwned","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`))
	assert.Equal(t, "graph", dead.Header.Get(bus.HeaderStage))
	assert.Contains(t, dead.Header.Get(bus.HeaderReason), "a trace id is one name, not a path")

	// A valid id with characters a file name cannot hold is encoded, inside
	// the folder.
	resp, err = http.Post(httpURL+"/v1/traces", "application/json", strings.NewReader(
		`{"trace_id":"odd id *>%00","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	report := filepath.Join(work, "reports", "root", "live", "odd%20id%20%2A%3E%2500", "audit.json")
	require.Eventually(t, func() bool { _, err := os.Stat(report); return err == nil }, 30*time.Second, 20*time.Millisecond)
	st, err := os.Stat(report)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "reports are private by default")
	st, err = os.Stat(filepath.Dir(report))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	in := filepath.Join(work, "in")
	require.NoError(t, os.MkdirAll(in, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(in, "chat.json"), []byte(`{"id":"../escaped-batch/pwned","messages":[{"role":"user","content":"hi"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(in, "long.json"), []byte(`{"trace_id":"`+strings.Repeat("l", 300)+`","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(in, "ok.json"), []byte(`{"trace_id":"fine","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`), 0o644))
	// ids that are the names of the batch's own files (found by probing)
	for _, id := range []string{"batch.json", "summary.md"} {
		require.NoError(t, os.WriteFile(filepath.Join(in, id+".json"), []byte(`{"trace_id":"`+id+`","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`), 0o644))
	}
	_, policy := examples(t)
	r := troy(t, work, "audit-batch", "in", policy, "--out-dir", "out")
	assert.Equal(t, 1, r.code, "rejected inputs exit 1: %s", r.stderr)
	assert.Contains(t, r.stderr, "rejected chat.json: id: \"../escaped-batch/pwned\" contains '/'")
	assert.Contains(t, r.stderr, "rejected long.json: trace_id: is 300 bytes, over the 255-byte limit")
	var b struct{ Audited, Rejected int }
	require.NoError(t, json.Unmarshal(read(t, work, "out/batch.json"), &b))
	assert.Equal(t, 3, b.Audited, "the valid traces are still audited")
	assert.Equal(t, 2, b.Rejected)
	assert.Contains(t, string(read(t, work, "out/summary.md")), "summary.md")
	_, err = os.Stat(filepath.Join(work, "out", "%62atch.json", "audit.json"))
	assert.NoError(t, err)

	assert.Empty(t, escaped(t, dir), "nothing is written outside the reports folders")
}

// troy check --nats-url asks the guard of a running troy serve (it ignored
// the flag before): the server's stored policy and sessions decide.
func TestCheckAgainstServe(t *testing.T) {
	dir := t.TempDir()
	natsURL, _ := startServe(t, dir)
	_, policy := examples(t)
	check := func(args ...string) result {
		return troyEnv(t, dir, []string{"NATS_URL=" + natsURL}, append([]string{"check", policy}, args...)...)
	}
	r := check("-a", "crm_lookup", "--metadata", `{"data_classification": "pii"}`, "--session", "run-7")
	require.Equal(t, 0, r.code, r.stderr)
	r = check("-a", "http_post", "--metadata", `{"network_zone": "external"}`, "--session", "run-7")
	assert.Equal(t, 2, r.code, "the server's session remembers the PII read: %s", r.stderr)
	assert.Contains(t, r.stdout, "external-call-after-pii")
	r = check("-a", "http_post", "--metadata", `{"network_zone": "external"}`, "--session", "run-8")
	assert.Equal(t, 0, r.code, "another session: %s", r.stderr)

	r = troyEnv(t, dir, []string{"NATS_URL=" + natsURL}, "check", "no-such-policy", "-a", "ls")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `no policy with id "no-such-policy"`)

	r = troy(t, dir, "check", policy, "-a", "ls", "--session", "run-7")
	assert.Equal(t, 1, r.code, "--session without a server is refused")
	assert.Contains(t, r.stderr, "--session needs --nats-url")
}

// One oversized input is one rejected input with its limit named; the batch
// goes on and writes its summary (issue 8: a file over the message size, or
// a .jsonl line over 64 MiB, aborted the whole batch).
func TestOversizedInputsDoNotStopABatch(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	require.NoError(t, os.MkdirAll(in, 0o755))
	step := `{"step_id":"1","type":"llm_call","output":"` + strings.Repeat("z", 17<<20) + `"}`
	require.NoError(t, os.WriteFile(filepath.Join(in, "huge.json"), []byte(`{"trace_id":"huge","agent_name":"a","steps":[`+step+`]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(in, "ok.json"), []byte(`{"trace_id":"fine","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`), 0o644))
	_, policy := examples(t)

	r := troy(t, dir, "audit-batch", "in", policy, "--out-dir", "out1", "--max-trace-bytes", "40000000")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Contains(t, r.stderr, "rejected huge.json:")
	assert.Contains(t, r.stderr, "over the NATS server's 16777216-byte message limit")
	assert.Contains(t, string(read(t, dir, "out1/summary.md")), "fine")

	require.NoError(t, os.WriteFile(filepath.Join(in, "huge.json"), []byte("{\"trace_id\":\"x\"}\n"+`{"trace_id":"huge","agent_name":"a","steps":[`+step+`]}`+"\n"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(in, "huge.json"), filepath.Join(in, "lines.jsonl")))
	r = troy(t, dir, "audit-batch", "in", policy, "--out-dir", "out2")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Regexp(t, `rejected lines.jsonl:2: input too large: \d+ bytes, over the 4194304-byte limit`, r.stderr)
	assert.Contains(t, r.stderr, "rejected lines.jsonl:1:")
	var b struct{ Audited, Rejected int }
	require.NoError(t, json.Unmarshal(read(t, dir, "out2/batch.json"), &b))
	assert.Equal(t, 1, b.Audited)
	assert.Equal(t, 2, b.Rejected)
}

// Inputs that crashed a handler or held a connection (issue 8): an empty
// step body over HTTP and over NATS, and a client that never finishes its
// request.
func TestEmptyBodiesAndSlowClients(t *testing.T) {
	dir := t.TempDir()
	natsURL, httpURL := startServe(t, dir, "--http-read-timeout", "1s")

	resp, err := http.Post(httpURL+"/v1/traces/t-1/steps", "application/json", strings.NewReader(""))
	require.NoError(t, err, "an answer, not an empty reply")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "the document is empty")

	dead := publishForDeadLetter(t, natsURL, bus.StreamSubject(bus.StreamStep, "t-2", 8), nil)
	assert.Equal(t, "streamer", dead.Header.Get(bus.HeaderStage), "the streamer dead-letters it, and lives")
	assert.Contains(t, dead.Header.Get(bus.HeaderReason), "the document is empty")
	resp, err = http.Get(httpURL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	conn, err := net.Dial("tcp", strings.TrimPrefix(httpURL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	start := time.Now()
	_, err = io.ReadAll(conn) // returns when the server closes the connection
	require.NoError(t, err, "closed by the server, not by our deadline")
	t.Logf("slow client cut off after %s", time.Since(start))
}
