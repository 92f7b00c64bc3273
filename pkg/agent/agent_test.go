package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/agenttest"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

// Script builders, named as in the reference's scenarios.
var (
	P     = agenttest.Plan
	A     = agenttest.Act
	E     = agenttest.Eval
	S     = agenttest.Submit
	write = agenttest.Write
)

type harness struct {
	t      *testing.T
	ws     string
	model  *llm.Scripted
	rec    *agent.Recorder
	store  *agent.MemoryStore
	agent  *agent.Agent
	budget agent.Budget
}

func newHarness(t *testing.T, script ...llm.ScriptedResponse) *harness {
	t.Helper()
	h := &harness{t: t, ws: t.TempDir(), model: &llm.Scripted{ModelName: "scripted", Responses: script},
		rec: &agent.Recorder{}, store: agent.NewMemoryStore()}
	h.build()
	return h
}

func (h *harness) build() {
	reg, err := tools.NewRegistry(tools.FileSystem{}, tools.Scratchpad{}, tools.Submit{}, tools.ExecuteCode{})
	require.NoError(h.t, err)
	h.agent, err = agent.New(agent.Config{Name: "tester", Model: h.model, Tools: reg, Store: h.store, Sink: h.rec,
		Workspace: h.ws, Budget: h.budget})
	require.NoError(h.t, err)
}

func (h *harness) run(ctl *agent.Control) agent.Result {
	h.t.Helper()
	res, err := h.agent.Run(context.Background(), "write hi to f.txt", ctl)
	require.NoError(h.t, err)
	return res
}

// Every run ends with exactly one run.end, last.
func (h *harness) assertEnded(status agent.Status) {
	h.t.Helper()
	ends := h.rec.Of(agent.EventRunEnd)
	require.Len(h.t, ends, 1)
	types := h.rec.Types()
	assert.Equal(h.t, agent.EventRunEnd, types[len(types)-1])
	assert.Equal(h.t, string(status), ends[0].Data["status"])
}

// Scenario 1: happy path, tools withheld in ANALYZE and OBSERVE.
func TestHappyPath(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")),
		E("success", "wrote 2 characters", "complete", "s1"), P("s2", "submit"), S("complete"))
	res := h.run(nil)
	assert.Equal(t, agent.Complete, res.Status)
	assert.True(t, res.OK())
	assert.Equal(t, "hi", res.Answer)
	assert.Equal(t, 2, res.Iterations)
	b, err := os.ReadFile(filepath.Join(h.ws, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(b))
	calls := h.model.Calls()
	require.Len(t, calls, 5, "no OBSERVE after submit")
	for i, c := range calls {
		if i == 1 || i == 4 {
			assert.Equal(t, llm.ToolChoiceRequired, c.ToolChoice, "call %d", i+1)
			assert.NotEmpty(t, c.Tools)
		} else {
			assert.Equal(t, llm.ToolChoiceNone, c.ToolChoice, "call %d", i+1)
			assert.Empty(t, c.Tools, "call %d offers no tools", i+1)
		}
	}
	assert.Equal(t, []string{"analyze", "act", "observe", "analyze", "act"},
		[]string{calls[0].Phase, calls[1].Phase, calls[2].Phase, calls[3].Phase, calls[4].Phase})
	// The tool result rides on the OBSERVE turn.
	last := calls[2].Turns[len(calls[2].Turns)-1]
	require.Len(t, last.ToolResults, 1)
	assert.Equal(t, "Wrote 2 characters to f.txt", last.ToolResults[0].Content)
	assert.Contains(t, calls[0].System, "# Goal\nwrite hi to f.txt")
	assert.Contains(t, calls[0].System, "## `file_system` [mutates_state]")
	h.assertEnded(agent.Complete)
	assert.Len(t, h.rec.Of(agent.EventIterationEnd), 2)
	want := []string{"run.start", "iteration.start", "llm.request", "llm.response", "cost.recorded", "plan.created",
		"llm.request", "llm.response", "cost.recorded", "tool.call", "tool.result",
		"llm.request", "llm.response", "cost.recorded", "evaluation.created", "iteration.end"}
	assert.Equal(t, want, h.rec.Types()[:len(want)])
	st, err := h.store.Load(context.Background(), res.SessionID)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, st.Status)
	assert.Equal(t, 2, st.ToolCallCount)
}

// Scenario 2: ACT calls another tool than the plan's; it is never executed.
func TestActWrongToolIsRetriedNotExecuted(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("execute_code", map[string]any{"language": "bash", "code": "touch pwned"}),
		A("file_system", write("f.txt", "hi")), E("success", "wrote 2 characters", "in_progress", "s1"), P("s2", "submit"), S("complete"))
	res := h.run(nil)
	assert.Equal(t, agent.Complete, res.Status)
	assert.NoFileExists(t, filepath.Join(h.ws, "pwned"))
	v := h.rec.Of(agent.EventContractViolation)
	require.Len(t, v, 1)
	assert.Equal(t, "act", v[0].Phase)
	assert.Equal(t, 1, v[0].Data["attempt"])
	assert.Equal(t, "plan committed to 'file_system' but called ['execute_code']", v[0].Data["reason"])
	third := h.model.Calls()[2]
	turn := third.Turns[len(third.Turns)-1]
	require.Len(t, turn.ToolResults, 1, "the rejected call is closed")
	assert.Equal(t, "call_2_1", turn.ToolResults[0].CallID)
	assert.True(t, turn.ToolResults[0].IsError)
	assert.Contains(t, turn.ToolResults[0].Content, "Not executed")
	assert.Contains(t, turn.Text, "attempt 2 of 3")
	st, _ := h.store.Load(context.Background(), res.SessionID)
	assert.Len(t, st.Iterations[0].Violations, 1)
	assert.Equal(t, "file_system", st.Iterations[0].ToolCalls[0].Tool)
}

// Scenario 3: ACT never calls a tool: failed after 3 attempts.
func TestActContractExhaustionFails(t *testing.T) {
	none := llm.ScriptedResponse{Text: "I would rather not."}
	h := newHarness(t, P("s1", "file_system"), none, none, none)
	res := h.run(nil)
	assert.Equal(t, agent.Failed, res.Status)
	assert.Contains(t, res.Answer, "after 3 attempts")
	v := h.rec.Of(agent.EventContractViolation)
	require.Len(t, v, 3)
	for i, e := range v {
		assert.Equal(t, i+1, e.Data["attempt"])
		assert.Equal(t, "no tool called", e.Data["reason"])
	}
	errs := h.rec.Of(agent.EventError)
	require.Len(t, errs, 1)
	assert.Equal(t, "Unrecoverable contract violation: no tool called", errs[0].Data["message"])
	h.assertEnded(agent.Failed)
}

// Scenario 4: prose instead of a plan, then recovery; the last plan wins;
// a step id that is not declared is a violation; so is an unknown tool,
// caught in ANALYZE instead of burning ACT attempts.
func TestAnalyzeViolations(t *testing.T) {
	bad := P("s99", "file_system")
	unknown := P("s1", "teleport")
	two := llm.ScriptedResponse{Text: P("s1", "execute_code").Text + "\nOn second thought:\n" + P("s2", "submit").Text}
	h := newHarness(t, llm.ScriptedResponse{Text: "I think I'll write the file"}, bad, unknown) // 3 attempts: fails

	res := h.run(nil)
	assert.Equal(t, agent.Failed, res.Status)
	reasons := []any{}
	for _, e := range h.rec.Of(agent.EventContractViolation) {
		reasons = append(reasons, e.Data["reason"])
	}
	assert.Equal(t, []any{"no <plan> block found", "next_action.step_id does not reference a declared step",
		"next_action.tool 'teleport' is not a registered tool (available: execute_code, file_system, scratchpad, submit)"}, reasons)

	h = newHarness(t, llm.ScriptedResponse{Text: "prose"}, two, S("complete"))
	res = h.run(nil)
	assert.Equal(t, agent.Complete, res.Status, res.Answer)
	require.Len(t, h.rec.Of(agent.EventContractViolation), 1)
	assert.Equal(t, "submit", h.rec.Of(agent.EventPlanCreated)[0].Data["next_action"].(map[string]any)["tool"])
}

// Scenario 5: evidence too short, then fixed; unknown completed step ids.
func TestObserveViolations(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")),
		E("success", "it worked", "in_progress"), E("success", "s99 done fully", "in_progress", "s99"),
		E("success", "wrote 2 characters", "in_progress", "s1"), P("s2", "submit"), S("complete"))
	res := h.run(nil)
	assert.Equal(t, agent.Complete, res.Status)
	v := h.rec.Of(agent.EventContractViolation)
	require.Len(t, v, 2)
	assert.Equal(t, "evidence too short to be evidence", v[0].Data["reason"])
	assert.Equal(t, `completed_step_ids references unknown steps: ["s99"]`, v[1].Data["reason"])
	assert.Equal(t, "observe", v[0].Phase)
}

// Scenario 6: three failing iterations end blocked, with the hint given.
func TestThreeFailuresBlock(t *testing.T) {
	var script []llm.ScriptedResponse
	for range 3 {
		script = append(script, P("s1", "file_system"), A("file_system", map[string]any{"operation": "read", "path": "missing.txt"}),
			E("failure", "file not found error returned", "in_progress"))
	}
	h := newHarness(t, script...)
	res := h.run(nil)
	assert.Equal(t, agent.Blocked, res.Status)
	assert.True(t, strings.HasPrefix(res.Answer, "Halted after 3 consecutive failed iterations."), res.Answer)
	assert.Equal(t, []string{"carry on"}, res.UnmetRequirements)
	calls := h.model.Calls()
	require.Len(t, calls, 9, "no 4th ANALYZE")
	lastUser := func(c llm.Request) string { return c.Turns[len(c.Turns)-1].Text }
	assert.NotContains(t, lastUser(calls[0]), "failing evaluations in a row")
	assert.Contains(t, lastUser(calls[3]), "1 failing evaluations in a row")
	assert.Contains(t, lastUser(calls[6]), "2 failing evaluations in a row")
	for _, r := range h.rec.Of(agent.EventToolResult) {
		assert.Equal(t, "not_found", r.Data["error_code"])
	}
}

// Scenario 7: submit with status complete and unmet requirements is refused
// and the run goes on.
func TestSubmitContradictionRejected(t *testing.T) {
	h := newHarness(t, P("s2", "submit"), S("complete", "x"), E("failure", "submit refused: unmet requirements", "in_progress"),
		P("s2", "submit"), S("partial", "x"))
	res := h.run(nil)
	assert.Equal(t, agent.Partial, res.Status)
	first := h.rec.Of(agent.EventToolResult)[0]
	assert.Equal(t, false, first.Data["ok"])
	assert.Equal(t, "invalid_input", first.Data["error_code"])
	assert.Equal(t, "observe", h.model.Calls()[2].Phase)
	assert.Equal(t, []string{"x"}, res.UnmetRequirements)
}

// Scenario 8: the iteration budget.
func TestBudgetExhaustion(t *testing.T) {
	var script []llm.ScriptedResponse
	for i := range 5 {
		script = append(script, P("s1", "file_system"), A("file_system", write(fmt.Sprintf("f%d.txt", i), "x")),
			E("partial", "wrote one more file", "in_progress"))
	}
	h := newHarness(t, script...)
	h.budget = agent.Budget{MaxIterations: 2}
	h.build()
	res := h.run(nil)
	assert.Equal(t, agent.Exhausted, res.Status)
	assert.Equal(t, "Ran out of budget (max_iterations=2) before completing the goal.", res.Answer)
	be := h.rec.Of(agent.EventBudgetExceeded)
	require.Len(t, be, 1)
	assert.Equal(t, "max_iterations=2", be[0].Data["which"])
	assert.Len(t, h.model.Calls(), 6)
	st, err := h.store.Load(context.Background(), res.SessionID)
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, st.Status)
}

// Budgets are checked before every call, not once per iteration (the
// reference overshoots max_tokens by up to three calls).
func TestTokenBudgetCheckedBeforeEveryCall(t *testing.T) {
	big := func(r llm.ScriptedResponse) llm.ScriptedResponse {
		r.Usage = llm.Usage{InputTokens: 600, OutputTokens: 10}
		return r
	}
	h := newHarness(t, big(P("s1", "file_system")), big(A("file_system", write("f.txt", "hi"))),
		big(E("success", "wrote 2 characters", "in_progress")))
	h.budget = agent.Budget{MaxTokens: 1000}
	h.build()
	res := h.run(nil)
	assert.Equal(t, agent.Exhausted, res.Status)
	assert.Len(t, h.model.Calls(), 2, "stopped before the third call")
	assert.FileExists(t, filepath.Join(h.ws, "f.txt"))
	st, _ := h.store.Load(context.Background(), res.SessionID)
	require.Len(t, st.Pending, 1, "the executed call's result waits for a resume")
}

// Scenario 13: a cancel while ACT is in flight lets the tool run and stops
// before OBSERVE; a cancel during OBSERVE stops before the next ANALYZE.
func TestCancelCheckpoints(t *testing.T) {
	ctl := &agent.Control{}
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")), E("success", "wrote 2 characters", "in_progress"))
	h.model.OnCall = func(i int, _ llm.Request) {
		if i == 1 {
			ctl.Cancel("test cancel")
		}
	}
	res := h.run(ctl)
	assert.Equal(t, agent.Cancelled, res.Status)
	assert.Equal(t, "Run cancelled: test cancel", res.Answer)
	assert.False(t, res.OK())
	assert.Len(t, h.model.Calls(), 2)
	assert.FileExists(t, filepath.Join(h.ws, "f.txt"))
	c := h.rec.Of(agent.EventRunCancelled)
	require.Len(t, c, 1)
	assert.Equal(t, "test cancel", c[0].Data["reason"])
	h.assertEnded(agent.Cancelled)

	ctl = &agent.Control{}
	h = newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")), E("success", "wrote 2 characters", "in_progress"), P("s2", "submit"))
	h.model.OnCall = func(i int, _ llm.Request) {
		if i == 2 {
			ctl.Cancel("later")
		}
	}
	res = h.run(ctl)
	assert.Equal(t, agent.Cancelled, res.Status)
	assert.Len(t, h.model.Calls(), 3)

	// A Control is one run's: a cancel that arrives while the run is being
	// set up stops it at its first checkpoint, before any model call (the
	// reference clears it instead, losing a Ctrl-C pressed early).
	ctl = &agent.Control{}
	ctl.Cancel("early")
	h = newHarness(t, P("s2", "submit"), S("complete"))
	assert.Equal(t, agent.Cancelled, h.run(ctl).Status)
	assert.Empty(t, h.model.Calls())

	// A second run with its own Control is not touched by the first's.
	assert.Equal(t, agent.Complete, h.run(&agent.Control{}).Status)
}

// Scenario 14 and §5.3 item 5: resume after a cancel between EXECUTE and
// OBSERVE continues the numbering and delivers the pending tool result.
func TestResumeAfterCancel(t *testing.T) {
	ctl := &agent.Control{}
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")))
	h.model.OnCall = func(i int, _ llm.Request) {
		if i == 1 {
			ctl.Cancel("test cancel")
		}
	}
	res := h.run(ctl)
	require.Equal(t, agent.Cancelled, res.Status)
	first := res.RunID

	resumed := &llm.Scripted{ModelName: "scripted", Responses: []llm.ScriptedResponse{P("s2", "submit"), S("complete")}}
	h.model = resumed
	h.build()
	res2, err := h.agent.Resume(context.Background(), res.SessionID, nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res2.Status)
	assert.Equal(t, res.SessionID, res2.SessionID)
	assert.NotEqual(t, first, res2.RunID, "each run of a session is its own trace")
	assert.Equal(t, 2, res2.Iterations, "numbering continues")
	starts := h.rec.Of(agent.EventRunStart)
	assert.Equal(t, true, starts[len(starts)-1].Data["resumed"])
	// The first call after resume carries the result that was never observed.
	turns := resumed.Calls()[0].Turns
	var delivered []llm.ToolResult
	for _, tu := range turns {
		delivered = append(delivered, tu.ToolResults...)
	}
	require.NotEmpty(t, delivered)
	assert.Equal(t, "Wrote 2 characters to f.txt", delivered[len(delivered)-1].Content)
	// Every tool call in the conversation has its result.
	assertWellFormed(t, turns)

	_, err = h.agent.Resume(context.Background(), res.SessionID, nil)
	assert.ErrorIs(t, err, agent.ErrNotResumable)
	_, err = h.agent.Resume(context.Background(), "nope", nil)
	assert.ErrorIs(t, err, agent.ErrSessionNotFound)
}

func assertWellFormed(t *testing.T, turns []llm.Turn) {
	t.Helper()
	open := map[string]bool{}
	for _, tu := range turns {
		for _, r := range tu.ToolResults {
			delete(open, r.CallID)
		}
		for _, c := range tu.ToolCalls {
			open[c.ID] = true
		}
	}
	assert.Empty(t, open, "tool calls without results")
}

// §5.3 item 1: a provider error still ends the run with a status and run.end.
func TestProviderErrorEndsTheRun(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), llm.ScriptedResponse{Error: &llm.ScriptedFailure{Status: 529, Message: "overloaded"}})
	res := h.run(nil)
	assert.Equal(t, agent.Failed, res.Status)
	assert.Contains(t, res.Answer, "overloaded")
	resp := h.rec.Of(agent.EventLLMResponse)
	assert.Equal(t, "error", resp[len(resp)-1].Data["status"])
	assert.Equal(t, 529, resp[len(resp)-1].Data["status_code"])
	h.assertEnded(agent.Failed)
	st, _ := h.store.Load(context.Background(), res.SessionID)
	assert.Equal(t, agent.Failed, st.Status)

	// A script that runs out is a provider failure too.
	h = newHarness(t, P("s1", "file_system"))
	assert.Equal(t, agent.Failed, h.run(nil).Status)
	h.assertEnded(agent.Failed)
}

func TestMultipleToolsInOneActIsAViolation(t *testing.T) {
	two := llm.ScriptedResponse{ToolCalls: []llm.ScriptedCall{{Name: "file_system", Arguments: write("a", "1")}, {Name: "file_system", Arguments: write("b", "2")}}}
	h := newHarness(t, P("s1", "file_system"), two, A("file_system", write("a", "1")), E("success", "wrote the file a", "in_progress"), P("s2", "submit"), S("complete"))
	res := h.run(nil)
	assert.Equal(t, agent.Complete, res.Status)
	assert.Equal(t, `called multiple tools in one iteration: ["file_system","file_system"]`, h.rec.Of(agent.EventContractViolation)[0].Data["reason"])
	assert.NoFileExists(t, filepath.Join(h.ws, "b"))
	assertWellFormed(t, h.model.Calls()[2].Turns)
}

// §5.3 item 6: nothing carries over from one run to the next on one Agent.
func TestRunsDoNotShareState(t *testing.T) {
	ctl := &agent.Control{}
	h := newHarness(t, P("s1", "scratchpad"), A("scratchpad", map[string]any{"action": "write", "key": "k", "value": "v"}),
		E("success", "stored key k in pad", "in_progress"), P("s2", "submit"), S("complete"),
		P("s1", "scratchpad"), A("scratchpad", map[string]any{"action": "read", "key": "k"}))
	r1 := h.run(ctl)
	r2 := h.run(ctl)
	assert.NotEqual(t, r1.SessionID, r2.SessionID)
	res := h.rec.Of(agent.EventToolResult)
	assert.Equal(t, "not_found", res[len(res)-1].Data["error_code"], "the second run does not see the first's scratchpad")
	assert.Equal(t, 1, r2.Iterations)
}

func TestConstruction(t *testing.T) {
	reg, err := tools.NewRegistry(tools.FileSystem{})
	require.NoError(t, err)
	_, err = agent.New(agent.Config{Model: &llm.Scripted{}, Tools: reg, Workspace: t.TempDir()})
	assert.ErrorContains(t, err, "must include the terminal `submit` tool")
	reg, _ = tools.NewRegistry(tools.Submit{})
	_, err = agent.New(agent.Config{Model: &llm.Scripted{}, Tools: reg, Workspace: filepath.Join(t.TempDir(), "nope")})
	assert.ErrorContains(t, err, "not a directory")
	a, err := agent.New(agent.Config{Model: &llm.Scripted{}, Tools: reg, Workspace: t.TempDir()})
	require.NoError(t, err)
	_, err = a.Run(context.Background(), "  ", nil)
	assert.ErrorContains(t, err, "goal is empty")
}

func TestMarkdown(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")), E("success", "wrote 2 characters", "in_progress", "s1"), P("s2", "submit"), S("complete"))
	h.run(nil)
	md := agent.Markdown(h.rec.Events())
	for _, want := range []string{"# Run `", "**Goal:** write hi to f.txt", "## Iteration 1", "- [ ] `s1` first",
		"**Next action:** `file_system` for step `s1`", "**Why:** because s1", "**Called** `file_system`",
		"**Result** (", "> Wrote 2 characters to f.txt", "**Evaluation:** success -- goal is in_progress", "## Outcome: complete"} {
		assert.Contains(t, md, want)
	}
}

// A sink that panics never breaks a run.
func TestFailingSinkDoesNotBreakTheRun(t *testing.T) {
	h := newHarness(t, P("s2", "submit"), S("complete"))
	reg, _ := tools.NewRegistry(tools.Submit{})
	a, err := agent.New(agent.Config{Model: h.model, Tools: reg, Workspace: h.ws,
		Sink: agent.SinkFunc(func(e agent.Event) {
			if e.Type == agent.EventToolCall {
				panic("sink down")
			}
		})})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res.Status)
	require.Len(t, res.Problems, 1)
	assert.Contains(t, res.Problems[0], "sink down")
}

// snapshots keeps every checkpoint, to restart a run from any of them as a
// runner that died there would.
type snapshots struct {
	*agent.MemoryStore
	all [][]byte
}

func (s *snapshots) Save(ctx context.Context, st *agent.State) error {
	b, _ := agent.EncodeState(st)
	s.all = append(s.all, b)
	return s.MemoryStore.Save(ctx, st)
}

// restore puts checkpoint i back as the session's state, as if the run had
// died right after it.
func (s *snapshots) restore(t *testing.T, i int) *agent.State {
	t.Helper()
	st, err := agent.DecodeState(s.all[i])
	require.NoError(t, err)
	require.NoError(t, s.MemoryStore.Save(context.Background(), st))
	return st
}

// A run whose runner died after submit executed ends as it submitted when
// it goes on, without asking the model again.
func TestCrashAfterSubmitEndsAsSubmitted(t *testing.T) {
	store := &snapshots{MemoryStore: agent.NewMemoryStore()}
	h := newHarness(t, P("s2", "submit"), S("complete"))
	h.store = store.MemoryStore
	reg, _ := tools.NewRegistry(tools.Submit{})
	a, err := agent.New(agent.Config{Model: h.model, Tools: reg, Workspace: h.ws, Store: store})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "g", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, res.Status)
	// the last checkpoint with the run still running: after EXECUTE
	i := len(store.all) - 1
	for ; i >= 0; i-- {
		st, _ := agent.DecodeState(store.all[i])
		if st.Status == agent.Running && st.Final != nil {
			break
		}
	}
	require.GreaterOrEqual(t, i, 0, "the submission is checkpointed before the run ends")
	store.restore(t, i)
	model := &llm.Scripted{}
	a, err = agent.New(agent.Config{Model: model, Tools: reg, Workspace: h.ws, Store: store})
	require.NoError(t, err)
	res2, err := a.Resume(context.Background(), res.SessionID, nil, agent.WithRunID(res.RunID))
	require.NoError(t, err)
	assert.Equal(t, agent.Complete, res2.Status)
	assert.Equal(t, "hi", res2.Answer)
	assert.Empty(t, model.Calls())
}

// The same run going on after a crash keeps its spent budgets.
func TestBudgetsSurviveACrashOfTheSameRun(t *testing.T) {
	var script []llm.ScriptedResponse
	for i := range 4 {
		script = append(script, P("s1", "file_system"), A("file_system", write(fmt.Sprintf("f%d", i), "x")), E("partial", "wrote one more file", "in_progress"))
	}
	store := &snapshots{MemoryStore: agent.NewMemoryStore()}
	reg, _ := tools.NewRegistry(tools.FileSystem{}, tools.Submit{})
	ws := t.TempDir()
	mk := func(m *llm.Scripted) *agent.Agent {
		a, err := agent.New(agent.Config{Model: m, Tools: reg, Workspace: ws, Store: store, Budget: agent.Budget{MaxIterations: 2}})
		require.NoError(t, err)
		return a
	}
	res, err := mk(&llm.Scripted{Responses: script}).Run(context.Background(), "g", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Exhausted, res.Status)
	// back to the end of iteration 1, still running
	i := 0
	for ; i < len(store.all); i++ {
		st, _ := agent.DecodeState(store.all[i])
		if st.Iteration == 1 && len(st.Iterations) == 1 && st.Iterations[0].Evaluation != nil {
			break
		}
	}
	store.restore(t, i)
	m := &llm.Scripted{Responses: script[3:]}
	res, err = mk(m).Resume(context.Background(), res.SessionID, nil, agent.WithRunID(res.RunID))
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, res.Status)
	assert.Len(t, m.Calls(), 3, "one iteration was left of the run's two")
}

// A run's deadline (its context's) ends it exhausted, not cancelled.
func TestDeadlineIsABudget(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("file_system", write("f.txt", "hi")))
	h.model.OnCall = func(i int, _ llm.Request) {
		if i == 0 {
			time.Sleep(150 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := h.agent.Run(ctx, "g", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Exhausted, res.Status)
	assert.Contains(t, res.Answer, "Ran out of time")
	h.assertEnded(agent.Exhausted)
}

// A call that failed cannot be judged a success nor complete a step (the
// reference takes the model's word for it).
func TestFailedCallCannotBeJudgedASuccess(t *testing.T) {
	h := newHarness(t, P("s1", "file_system"), A("file_system", map[string]any{"operation": "read", "path": "missing.csv"}),
		E("success", "shape: 90 rows x 6 columns", "in_progress", "s1"), E("failure", "the file is not there: not_found", "in_progress"),
		P("s2", "submit"), S("blocked", "the data"))
	res := h.run(nil)
	assert.Equal(t, agent.Blocked, res.Status)
	v := h.rec.Of(agent.EventContractViolation)
	require.Len(t, v, 1)
	assert.Contains(t, v[0].Data["reason"], "the call failed")
}
