package services_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/llm/llmtest"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/services/agentrunner"
)

func planText(step, tool string) string {
	b, _ := json.Marshal(map[string]any{"goal_restatement": "write a file, then answer",
		"steps":       []map[string]any{{"id": "s1", "description": "write"}, {"id": "s2", "description": "answer"}},
		"next_action": map[string]any{"step_id": step, "tool": tool, "rationale": "because " + step, "success_criteria": "it is done"}})
	return "<plan>" + string(b) + "</plan>"
}

const evalText = `<evaluation>{"outcome": "success", "evidence": "Wrote 2 characters to f.txt", "completed_step_ids": ["s1"], "goal_status": "in_progress", "next_step": "answer"}</evaluation>`

var (
	writeCall  = [][2]string{{"file_system", `{"operation":"write","path":"f.txt","content":"hi"}`}}
	submitCall = [][2]string{{"submit", `{"answer":"wrote f.txt","status":"complete","confidence":1}`}}
)

// agentSetup starts the pipeline and returns a request for a run on an
// OpenAI-compatible server, audited against a policy that flags every
// file_system call.
func agentSetup(t *testing.T, llmURL string) (*bustest.Server, bus.Deps, agentrun.Request, string) {
	t.Helper()
	srv, deps := bustest.Provisioned(t)
	start(t, all(t, deps)...)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	require.NoError(t, os.MkdirAll(ws, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(`
policy_id: agent-test
rules:
  - rule_id: fs-touch
    description: the agent touched the file system
    condition: step.type == 'tool_call' and step.name == 'file_system'
    severity: high
    action: log  # audited, not stopped: this test is about the audit
`), 0o644))
	t.Setenv("TROY_TEST_LLM_KEY", "sk-test-agent")
	cfgPath := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`name: writer
llm: {provider: openai, model: gpt-4o-mini, base_url: "`+llmURL+`", api_key: "${TROY_TEST_LLM_KEY}", max_retries: 0, timeout_s: 30}
tools: [file_system, submit]
audit: {policy: policy.yaml}
observability: {events_file: events.jsonl}
`), 0o644))
	_, err := spec.Load(cfgPath, nil)
	require.NoError(t, err)
	portable, err := spec.Portable(cfgPath)
	require.NoError(t, err)
	assert.NotContains(t, string(portable), "sk-test-agent", "no key travels in the request")
	req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: "write hi to f.txt", Config: portable, Workspace: ws}
	return srv, deps, req, ws
}

func runnerService(t *testing.T, deps bus.Deps, nc *nats.Conn, reg ...*prometheus.Registry) *agentrunner.Service {
	t.Helper()
	cfg := agentrunner.DefaultConfig()
	if len(reg) > 0 {
		cfg.Registerer = reg[0]
	}
	cfg.Env = spec.Only([]string{"TROY_TEST_LLM_KEY"}, spec.EnvThen(nil)) // what its operator lets configs read
	s, err := agentrunner.New(context.Background(), deps, nc, cfg)
	require.NoError(t, err)
	return s
}

func submit(t *testing.T, srv *bustest.Server, req agentrun.Request) {
	t.Helper()
	b, err := json.Marshal(req)
	require.NoError(t, err)
	_, err = srv.JS.Publish(context.Background(), agentrun.SubjectRun, b)
	require.NoError(t, err)
}

// A run's violations reach troy.violations.> while it runs: the model's
// OBSERVE answer is held back until the finding for the file_system call
// has arrived, so the run cannot have ended first.
func TestAgentRunIsAuditedWhileItRuns(t *testing.T) {
	seen := make(chan struct{})
	var calls atomic.Int32
	llm := llmtest.New(t, func(call int, r llmtest.Request) llmtest.Response {
		calls.Store(int32(call))
		switch call {
		case 1:
			return llmtest.Response{Content: planText("s1", "file_system")}
		case 2:
			return llmtest.Response{ToolCalls: writeCall}
		case 3:
			select { // OBSERVE waits for the violation
			case <-seen:
			case <-time.After(20 * time.Second):
			}
			return llmtest.Response{Content: evalText}
		case 4:
			return llmtest.Response{Content: planText("s2", "submit")}
		default:
			return llmtest.Response{ToolCalls: submitCall}
		}
	})
	srv, deps, req, ws := agentSetup(t, llm.BaseURL())
	reg := prometheus.NewRegistry()
	start(t, runnerService(t, deps, srv.NC, reg))
	var once sync.Once
	var before int32
	stop, err := agentrun.WatchViolations(context.Background(), srv.JS, req.RunID, func(f ocsf.Finding) {
		once.Do(func() { before = calls.Load(); close(seen) })
	})
	require.NoError(t, err)
	defer stop()
	reports := subscribe(t, srv.NC, "troy.report.live")
	submit(t, srv, req)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := agentrun.WaitResult(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, out.Status, out.Answer+out.Error)
	select {
	case <-seen:
	default:
		t.Fatal("no violation was published for the file_system call")
	}
	assert.LessOrEqual(t, before, int32(3), "the finding arrived before the model's OBSERVE answer, so before the run ended")
	b, err := os.ReadFile(filepath.Join(ws, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(b))

	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Equal(t, req.RunID, rep.Audit.Trace.TraceID)
	assert.Equal(t, "writer", rep.Audit.Trace.AgentName)
	require.Len(t, rep.Audit.Violations, 1)
	assert.Equal(t, "fs-touch", rep.Audit.Violations[0].RuleID)

	evs, err := agentrun.ReadEvents(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	assert.Equal(t, agent.EventRunStart, evs[0].Type)
	assert.Equal(t, agent.EventRunEnd, evs[len(evs)-1].Type)
	n, err := testutil.GatherAndCount(reg, "troy_agent_runs_total", "troy_agent_tool_calls_total", "troy_agent_llm_calls_total")
	require.NoError(t, err)
	assert.Positive(t, n, "the runner's metrics count the run")
	assert.Equal(t, 1.0, counterValue(t, reg, "troy_agent_runs_total", "complete"))
	// The decisions are in the run's ledger, chained.
	entries, err := ledger.Read(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	_, err = ledger.Verify(req.RunID, entries)
	require.NoError(t, err)
	var kinds []string
	for _, e := range entries {
		r, _ := ledger.Decode(e)
		kinds = append(kinds, r.Kind)
	}
	assert.Equal(t, []string{"iteration", "iteration", "run_end"}, kinds)
	last, _ := ledger.Decode(entries[len(entries)-1])
	assert.Equal(t, "complete", last.Data["status"])
	lines, err := os.ReadFile(filepath.Join(filepath.Dir(ws), "events.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, len(evs), bytes.Count(lines, []byte("\n")), "the events file has every event the bus has")
}

// Two runners share the queue; the one running a request is stopped in the
// middle of a model call, and the other goes on with the same run and
// session to the end.
func TestAgentRunnerStoppedMidRunIsResumedByAnother(t *testing.T) {
	var second atomic.Bool
	inflight := make(chan struct{})
	var once sync.Once
	llm := llmtest.New(t, func(call int, r llmtest.Request) llmtest.Response {
		switch call {
		case 1:
			return llmtest.Response{Content: planText("s1", "file_system")}
		case 2: // ACT of the first runner: it is stopped while waiting
			once.Do(func() { close(inflight) })
			return llmtest.Response{ToolCalls: writeCall, Delay: time.Minute}
		case 3:
			second.Store(true)
			return llmtest.Response{Content: planText("s1", "file_system")}
		case 4:
			return llmtest.Response{ToolCalls: writeCall}
		case 5:
			return llmtest.Response{Content: evalText}
		case 6:
			return llmtest.Response{Content: planText("s2", "submit")}
		default:
			return llmtest.Response{ToolCalls: submitCall}
		}
	})
	srv, deps, req, ws := agentSetup(t, llm.BaseURL())
	stopFirst := start(t, runnerService(t, deps, srv.NC))
	submit(t, srv, req)
	select {
	case <-inflight:
	case <-time.After(15 * time.Second):
		t.Fatal("the first runner never reached ACT")
	}
	stopFirst() // the runner shuts down mid-call
	sessions, err := agentrun.OpenSessions(context.Background(), srv.JS)
	require.NoError(t, err)
	st, err := sessions.Load(context.Background(), req.SessionID)
	require.NoError(t, err)
	assert.Equal(t, agent.Running, st.Status, "an interrupted run is left running, for the next runner")

	start(t, runnerService(t, deps, srv.NC))
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	out, err := agentrun.WaitResult(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, out.Status, out.Answer+out.Error)
	assert.True(t, second.Load())
	assert.Equal(t, req.RunID, out.RunID, "the same run goes on")
	assert.Equal(t, 3, out.Iterations, "iteration 1 was cut short; 2 and 3 ran on the second runner")
	b, err := os.ReadFile(filepath.Join(ws, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(b))
	evs, err := agentrun.ReadEvents(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	var starts []bool
	for _, e := range evs {
		if e.Type == agent.EventRunStart {
			starts = append(starts, e.Data["resumed"] == true)
		}
	}
	assert.Equal(t, []bool{false, true}, starts)
	entries, err := ledger.Read(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	_, err = ledger.Verify(req.RunID, entries)
	require.NoError(t, err, "the second runner goes on with the same chain")
	ends := 0
	for _, e := range entries {
		if r, _ := ledger.Decode(e); r.Kind == "run_end" {
			ends++
		}
	}
	assert.Equal(t, 1, ends, "one end, written by the runner that ended the run")
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A call waiting for a person when its runner stops is still waiting, on
// the same approval, under the next runner; the decision made meanwhile
// lets it run.
func TestApprovalSurvivesARunnerRestart(t *testing.T) {
	llm := llmtest.New(t, func(call int, r llmtest.Request) llmtest.Response {
		switch call {
		case 1:
			return llmtest.Response{Content: planText("s1", "file_system")}
		case 2:
			return llmtest.Response{ToolCalls: [][2]string{{"file_system", `{"operation":"delete","path":"old.txt"}`}}}
		case 3:
			return llmtest.Response{Content: `<evaluation>{"outcome": "success", "evidence": "old.txt was deleted", "completed_step_ids": ["s1"], "goal_status": "in_progress", "next_step": "answer"}</evaluation>`}
		case 4:
			return llmtest.Response{Content: planText("s2", "submit")}
		default:
			return llmtest.Response{ToolCalls: submitCall}
		}
	})
	srv, deps, req, ws := agentSetup(t, llm.BaseURL())
	require.NoError(t, os.WriteFile(filepath.Join(ws, "old.txt"), []byte("x"), 0o644))
	// the same config, with approvals over the bus and no audit (this test is about the wait)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(req.Config, &cfg))
	cfg["guardrails"] = map[string]any{"approver": map[string]any{"type": "nats", "timeout_s": 120}}
	cfg["audit"] = map[string]any{"enabled": false}
	req.Config, _ = json.Marshal(cfg)

	stopFirst := start(t, runnerService(t, deps, srv.NC))
	submit(t, srv, req)
	approvals, err := agentrun.OpenApprovals(context.Background(), srv.JS)
	require.NoError(t, err)
	var id string
	require.Eventually(t, func() bool {
		items, _ := approvals.List(context.Background(), false)
		if len(items) == 1 {
			id = items[0].ID
			return true
		}
		return false
	}, 15*time.Second, 20*time.Millisecond, "the delete waits for a person")
	stopFirst()
	sessions, err := agentrun.OpenSessions(context.Background(), srv.JS)
	require.NoError(t, err)
	st, err := sessions.Load(context.Background(), req.SessionID)
	require.NoError(t, err)
	require.NotNil(t, st.Awaiting, "the waiting call is part of the session")
	assert.Equal(t, agent.Running, st.Status)
	assert.FileExists(t, filepath.Join(ws, "old.txt"))

	_, err = approvals.Decide(context.Background(), id, true, "ann", "fine")
	require.NoError(t, err)
	start(t, runnerService(t, deps, srv.NC))
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	out, err := agentrun.WaitResult(ctx, srv.JS, req.RunID)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, out.Status, out.Answer+out.Error)
	assert.NoFileExists(t, filepath.Join(ws, "old.txt"), "approved while no runner ran, then carried out")
	items, err := approvals.List(context.Background(), true)
	require.NoError(t, err)
	assert.Len(t, items, 1, "asked once")
	assert.Equal(t, 5, llm.Calls(), "the call was not planned again")
}
