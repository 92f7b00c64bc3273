package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/tracegen"
)

var evaluatorOK = regexp.MustCompile(`troy_stage_messages_total\{outcome="ok",stage="evaluator"\} (\d+)`)

// TestTwoEvaluatorsSplitABatch: two `troy serve --target evaluator`
// processes share the evaluator's durable consumer: a 10,000-trace batch is
// split between them and every trace is evaluated exactly once.
func TestTwoEvaluatorsSplitABatch(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	_, policy := examples(t)
	dir := t.TempDir()
	srv := bustest.RunServer(t)

	const n = 10_000
	f, err := os.Create(filepath.Join(dir, "traces.jsonl"))
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	for i := range n {
		b, err := json.Marshal(tracegen.Trace(5, i, 5))
		require.NoError(t, err)
		w.Write(append(b, '\n'))
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())

	start := func(targets string) string {
		_, httpURL := serveTarget(t, dir, srv.URL, targets)
		return httpURL
	}
	start("ingest,graph,explainer,scorer,reporter")
	e1, e2 := start("evaluator"), start("evaluator")

	r := troy(t, dir, "audit-batch", ".", policy, "--out-dir", "out", "--nats-url", srv.URL)
	require.Equal(t, 0, r.code, r.stderr)
	var b report.Batch
	require.NoError(t, json.Unmarshal(read(t, dir, "out/batch.json"), &b))
	assert.Equal(t, n, b.Audited)

	count := func(url string) int {
		body, _ := get(t, url+"/metrics")
		m := evaluatorOK.FindStringSubmatch(body)
		require.NotNil(t, m, "evaluator metric at %s", url)
		v, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return v
	}
	c1, c2 := count(e1), count(e2)
	t.Logf("evaluator 1 handled %d traces, evaluator 2 handled %d", c1, c2)
	assert.Positive(t, c1)
	assert.Positive(t, c2)
	assert.Equal(t, n, c1+c2, "each trace evaluated exactly once")
}

// TestAuditBatchReadsChatLogs runs the real pipeline over the chat-format
// fixtures (tau-bench and AgentInstruct JSONL): every run is audited.
func TestAuditBatchReadsChatLogs(t *testing.T) {
	root, err := filepath.Abs(fixtures.Path(t, "fixtures"))
	require.NoError(t, err)
	dir := t.TempDir()
	for folder, n := range map[string]int{"tau-bench": 30, "agent-instruct": 195} {
		r := troy(t, dir, "audit-batch", filepath.Join(root, folder), filepath.Join(mustAbs(t, "../../pkg/templates"), "agent_safety.yaml"), "--out-dir", folder)
		require.Equal(t, 0, r.code, r.stderr)
		var b report.Batch
		require.NoError(t, json.Unmarshal(read(t, dir, folder+"/batch.json"), &b))
		assert.Equal(t, n, b.Audited, folder)
	}
	var a report.Audit
	require.NoError(t, json.Unmarshal(read(t, dir, "tau-bench/task-0-trial-0/audit.json"), &a))
	assert.Equal(t, 0.0, a.Trace.Metadata["reward"])
	assert.Equal(t, "observation", a.Trace.Steps[0].Type)
	_, err = os.Stat(filepath.Join(dir, "agent-instruct", "agent_instruct_os.jsonl-1", "report.md"))
	assert.NoError(t, err, "an id-less chat log is named after its file and line")
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}
