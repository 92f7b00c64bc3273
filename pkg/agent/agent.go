// Package agent is troy's governed agent loop: plan, act, execute, observe.
// Each phase is a contract the model must satisfy before the run goes on;
// a broken contract is corrected, never executed. The package knows nothing
// of NATS: the model, tools, session store and event sink are interfaces,
// so the loop is tested with a scripted model and real tools.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/trace"
)

// Model completes a conversation with tools (an llm.Provider).
type Model interface {
	Complete(ctx context.Context, req llm.Request) (llm.Completion, error)
	Model() string
}

// Skills is the run's skill library.
type Skills interface {
	tools.SkillBook
	// Index is the markdown index the system prompt carries.
	Index() string
	// Requires lists, per skill, the tools it uses.
	Requires() map[string][]string
}

// Budget bounds one run (one invocation of Run or Resume). Zero fields take
// the defaults.
type Budget struct {
	MaxIterations          int
	MaxTokens              int
	MaxToolCalls           int
	MaxWall                time.Duration
	MaxConsecutiveFailures int
}

// Budget defaults.
const (
	DefaultMaxIterations          = 20
	DefaultMaxTokens              = 500_000
	DefaultMaxToolCalls           = 100
	DefaultMaxWall                = 15 * time.Minute
	DefaultMaxConsecutiveFailures = 3
	DefaultMaxContractRetries     = 2
)

func (b Budget) withDefaults() Budget {
	if b.MaxIterations <= 0 {
		b.MaxIterations = DefaultMaxIterations
	}
	if b.MaxTokens <= 0 {
		b.MaxTokens = DefaultMaxTokens
	}
	if b.MaxToolCalls <= 0 {
		b.MaxToolCalls = DefaultMaxToolCalls
	}
	if b.MaxWall <= 0 {
		b.MaxWall = DefaultMaxWall
	}
	if b.MaxConsecutiveFailures <= 0 {
		b.MaxConsecutiveFailures = DefaultMaxConsecutiveFailures
	}
	return b
}

// Config assembles an agent.
type Config struct {
	Name               string // the agent's name in traces and reports
	Model              Model
	Tools              *tools.Registry
	Skills             Skills // may be nil
	Store              Store  // nil: in memory
	Sink               Sink   // may be nil
	Budget             Budget
	MaxContractRetries int // per phase per iteration; 0: 2 (negative: none)
	Workspace          string
	ExtraInstructions  string
	MaxTokensPerCall   int
	Compaction         Compaction
	// Gate screens calls and results (pkg/agent/guardrails); nil: none.
	Gate Gate
	// Breaker stops runs that spend too much or go nowhere.
	Breaker Breaker
	// Redact, when set, cleans what events carry of a call's arguments
	// and results (secrets), since events leave the run.
	Redact func(any) any
	// CheckpointTimeout bounds a session save.
	CheckpointTimeout time.Duration
	// Origin is kept with a new session: what built the run (the runner's
	// request), so a resume can rebuild it.
	Origin []byte
}

// Gate screens tool calls before they run and their results before the
// model reads them. It must not panic and must fail closed.
type Gate interface {
	ScreenCall(ctx context.Context, c GateCall) GateVerdict
	// ScreenResult returns the text the model gets, and a verdict when
	// the content was withheld.
	ScreenResult(tool, text string, emit func(string, map[string]any)) (string, *GateVerdict)
}

// GateCall is a call to screen.
type GateCall struct {
	RunID, SessionID, Agent, Goal string
	Iteration                     int
	CallID                        string
	Tool                          string
	Safety                        tools.Safety
	Arguments                     json.RawMessage
	Rationale                     string
	// History is the run's trace so far.
	History []*trace.Step
	Emit    func(typ string, data map[string]any)
	// BeforeWait is called before the gate waits for a person.
	BeforeWait func()
}

// GateVerdict is a screening's outcome.
type GateVerdict struct {
	Blocked bool
	Err     *tools.Error // what the model reads when blocked
	Record  any          // kept in the iteration's safety checks
	WaitMS  int64        // time spent waiting for a human
}

// Option sets how a run is identified.
type Option func(*runOptions)

type runOptions struct{ runID, sessionID string }

// WithRunID names the run (a trace id): the submitter chose it, or a
// resume after a crash continues the same run.
func WithRunID(id string) Option { return func(o *runOptions) { o.runID = id } }

// WithSessionID names a new session.
func WithSessionID(id string) Option { return func(o *runOptions) { o.sessionID = id } }

func options(opts []Option) runOptions {
	var o runOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Agent runs goals. It holds no per-run state: runs on one Agent never
// share spend, counters or cancellation.
type Agent struct {
	cfg Config
}

// New checks the configuration: a model, a registry with a terminal
// `submit`, a workspace that exists, skills that name only registered tools.
func New(cfg Config) (*Agent, error) {
	if cfg.Model == nil {
		return nil, errors.New("agent: no model configured")
	}
	if cfg.Tools == nil || !cfg.Tools.Has("submit") {
		return nil, errors.New("agent: the tools must include the terminal `submit` tool, or no run could ever finish")
	}
	if spec, _ := cfg.Tools.Spec("submit"); !spec.Terminal {
		return nil, errors.New("agent: the tool named `submit` must be terminal")
	}
	if cfg.Workspace == "" {
		return nil, errors.New("agent: no workspace directory")
	}
	if fi, err := os.Stat(cfg.Workspace); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("agent: workspace %s is not a directory (create it first)", cfg.Workspace)
	}
	if cfg.Skills != nil {
		reqs := cfg.Skills.Requires()
		names := make([]string, 0, len(reqs))
		for n := range reqs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			for _, t := range reqs[n] {
				if !cfg.Tools.Has(t) {
					return nil, fmt.Errorf("agent: skill/tool mismatch: skill '%s' references unregistered tool '%s'", n, t)
				}
			}
		}
	}
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore()
	}
	if cfg.MaxContractRetries == 0 {
		cfg.MaxContractRetries = DefaultMaxContractRetries
	}
	if cfg.MaxContractRetries < 0 {
		cfg.MaxContractRetries = 0
	}
	if cfg.CheckpointTimeout <= 0 {
		cfg.CheckpointTimeout = 10 * time.Second
	}
	cfg.Budget = cfg.Budget.withDefaults()
	return &Agent{cfg: cfg}, nil
}

// ErrRunCancelled is the cause of a context ended by a run's cancel (a
// wait for a person it stopped), as against a runner shutting down.
var ErrRunCancelled = errors.New("the run was cancelled")

// Control cancels a run cooperatively: the run stops at its next
// checkpoint (before an LLM call, or between iterations) and still ends
// with a normal result. Calls already in flight finish. A Control belongs
// to one run: a Cancel that comes while the run is being set up counts.
type Control struct {
	mu     sync.Mutex
	reason string
	set    bool
	hooks  map[int]func()
	next   int
}

// Cancel asks the run to stop; safe from any goroutine.
func (c *Control) Cancel(reason string) {
	c.mu.Lock()
	if !c.set {
		c.set, c.reason = true, reason
	}
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

// onCancel runs f when the run is cancelled (at once if it was); the
// returned function removes it.
func (c *Control) onCancel(f func()) func() {
	c.mu.Lock()
	if c.set {
		c.mu.Unlock()
		f()
		return func() {}
	}
	if c.hooks == nil {
		c.hooks = map[int]func(){}
	}
	c.next++
	id := c.next
	c.hooks[id] = f
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.hooks, id)
		c.mu.Unlock()
	}
}

// Cancelled reports whether Cancel was called, and why.
func (c *Control) Cancelled() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason, c.set
}

// Result is how a run ended.
type Result struct {
	Status            Status   `json:"status"`
	Answer            string   `json:"answer"`
	Confidence        float64  `json:"confidence"`
	Evidence          []string `json:"evidence"`
	UnmetRequirements []string `json:"unmet_requirements"`
	Iterations        int      `json:"iterations"`
	TotalTokens       int      `json:"total_tokens"`
	CostUSD           float64  `json:"cost_usd"`
	DurationS         float64  `json:"duration_s"`
	SessionID         string   `json:"session_id"`
	RunID             string   `json:"run_id"`
	// IdleS is the time spent waiting for human approvals.
	IdleS float64 `json:"idle_s,omitempty"`
	// Problems are failures around the run that did not stop it (an event
	// sink that panicked).
	Problems []string `json:"problems,omitempty"`
}

// OK reports a complete run.
func (r Result) OK() bool { return r.Status == Complete }

// Run starts a new session for goal. The returned error is for what stops
// a run from starting (an empty goal, a store that cannot save); every run
// that starts ends with a Result, whatever happens inside it.
func (a *Agent) Run(ctx context.Context, goal string, ctl *Control, opts ...Option) (Result, error) {
	goal = strings.TrimSpace(goal)
	if goal == "" {
		return Result{}, errors.New("agent: the goal is empty")
	}
	o := options(opts)
	if o.runID == "" {
		o.runID = NewID()
	}
	if o.sessionID == "" {
		o.sessionID = NewID()
	} else if _, err := a.cfg.Store.Load(ctx, o.sessionID); err == nil {
		return Result{}, fmt.Errorf("agent: session %s already exists: resume it instead", o.sessionID)
	}
	now := time.Now().UTC()
	st := &State{Goal: goal, SessionID: o.sessionID, RunID: o.runID, Agent: a.cfg.Name, Status: Running, Origin: a.cfg.Origin,
		Scratchpad: map[string]any{}, UsageByPhase: map[string]llm.Usage{}, CreatedAt: now, UpdatedAt: now,
		Iterations: []IterationRecord{}, Transcript: []llm.Turn{}}
	st.Runs = []string{st.RunID}
	return a.drive(ctx, st, ctl, false)
}

// Resume continues a session stopped from outside (cancelled, out of
// budget, failed, or left running by a crash) under a new run id; the
// iteration numbering, transcript, scratchpad and spend continue.
func (a *Agent) Resume(ctx context.Context, sessionID string, ctl *Control, opts ...Option) (Result, error) {
	st, err := a.cfg.Store.Load(ctx, sessionID)
	if err != nil {
		return Result{}, fmt.Errorf("agent: session %s: %w", sessionID, err)
	}
	if !st.Status.Resumable() {
		return Result{}, fmt.Errorf("agent: session %s ended %s: %w (only running, cancelled, exhausted or failed sessions can be)", sessionID, st.Status, ErrNotResumable)
	}
	if id := options(opts).runID; id != "" && id == st.RunID {
		// the same run goes on (its runner died): same trace, same id
	} else {
		if id == "" {
			id = NewID()
		}
		st.RunID = id
		st.Runs = append(st.Runs, st.RunID)
	}
	if st.Status != Running { // a crashed run keeps a submission it made
		st.Final, st.FinalAnswer = nil, ""
	}
	st.Status = Running
	return a.drive(ctx, st, ctl, true)
}

// stop ends a run from anywhere inside it.
type stop struct {
	status Status
	answer string
	sub    *tools.Submission
	reason string // for run.cancelled
}

func (s *stop) Error() string { return string(s.status) + ": " + s.answer }

type run struct {
	a       *Agent
	st      *State
	ctl     *Control
	env     *tools.Env
	started time.Time
	// per-run counters: budgets bound this invocation
	iterations int
	toolCalls  int
	usage      llm.Usage
	problems   []string
	takenOver  bool
	steps      Steps         // the run's trace, for the live policy guard
	history    []*trace.Step // its steps so far
	idle       time.Duration // waiting for approvals
}

func (a *Agent) drive(ctx context.Context, st *State, ctl *Control, resumed bool) (Result, error) {
	if ctl == nil {
		ctl = &Control{}
	}
	root, err := os.OpenRoot(a.cfg.Workspace)
	if err != nil {
		return Result{}, fmt.Errorf("agent: workspace: %w", err)
	}
	defer root.Close()
	r := &run{a: a, st: st, ctl: ctl, started: time.Now()}
	st.Breaker.reset(st.RunID) // a new run counts afresh; the same run goes on
	if c := st.Counters; c.RunID == st.RunID && !c.Started.IsZero() {
		// the same run going on after its runner died: its budgets go on too
		r.started, r.iterations, r.toolCalls, r.usage = c.Started, c.Iterations, c.ToolCalls, c.Usage
	}
	r.env = &tools.Env{Root: root, Scratchpad: st.Scratchpad, Skills: a.cfg.Skills,
		Notify: func(typ string, data map[string]any) { r.emit(typ, PhaseExecute, data) }}
	if err := a.cfg.Store.Save(ctx, st); err != nil {
		return Result{}, fmt.Errorf("agent: saving the new session: %w", err)
	}
	var skills []string
	if a.cfg.Skills != nil {
		skills = a.cfg.Skills.Names()
	}
	r.emit(EventRunStart, "", map[string]any{"goal": st.Goal, "model": a.cfg.Model.Model(),
		"tools": a.cfg.Tools.Names(), "skills": orEmpty(skills), "resumed": resumed, "session_id": st.SessionID,
		"guardrails": a.cfg.Gate != nil})
	closeDangling(st)
	if len(st.Pending) > 0 && st.Awaiting == nil {
		st.Transcript = append(st.Transcript, llm.Turn{Role: "user", Text: resumedResults, ToolResults: st.Pending, Iteration: st.Iteration})
		st.Pending = nil
	}
	if sub := st.Final; sub != nil && sub.Answer != "" {
		// It had submitted when its runner died: it ends as it chose.
		return r.finish(ctx, &stop{status: Status(sub.Status), answer: sub.Answer, sub: sub}), nil
	}
	err = r.safeLoop(ctx, st.Awaiting)
	var s *stop
	if !errors.As(err, &s) {
		s = &stop{status: Failed, answer: fmt.Sprintf("The run failed: %v", err)}
	}
	return r.finish(ctx, s), nil
}

// safeLoop runs the loop; a panic inside it (a bug, a tool outside the
// registry's guard) still ends the run with a status and run.end.
func (r *run) safeLoop(ctx context.Context, awaiting *AwaitingCall) (err error) {
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprintf("internal error: %v", p)
			r.emit(EventError, "", map[string]any{"message": msg})
			err = &stop{status: Failed, answer: "The run failed: " + msg}
		}
	}()
	if awaiting != nil && awaiting.Plan != nil && len(r.st.Iterations) > 0 {
		// a call that was waiting for approval when the run stopped
		if err := r.carryOut(ctx, awaiting.Plan, awaiting.Call); err != nil {
			return err
		}
	}
	return r.loop(ctx)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *run) loop(ctx context.Context) error {
	for {
		if err := r.checkBudget(true); err != nil {
			return err
		}
		if err := r.checkCancel(ctx); err != nil {
			return err
		}
		if err := r.iterate(ctx); err != nil {
			return err
		}
	}
}

func (r *run) emit(typ, phase string, data map[string]any) {
	if r.a.cfg.Sink == nil && r.a.cfg.Gate == nil {
		return
	}
	if data == nil {
		data = map[string]any{}
	}
	// A sink never breaks a run: its panic is noted in the result.
	defer func() {
		if p := recover(); p != nil && len(r.problems) < 20 {
			r.problems = append(r.problems, fmt.Sprintf("event sink failed on %s: %v", typ, p))
		}
	}()
	ev := Event{ID: NewID(), TS: time.Now().UTC(), Type: typ, RunID: r.st.RunID, SessionID: r.st.SessionID,
		Agent: r.a.cfg.Name, Iteration: r.st.Iteration, Phase: phase, Data: data}
	if r.a.cfg.Gate != nil {
		if s := r.steps.Step(ev); s != nil {
			r.history = append(r.history, s)
		}
	}
	if r.a.cfg.Sink != nil {
		r.a.cfg.Sink.Emit(ev)
	}
}

// save checkpoints the session; a failure is reported as an event and the
// run goes on (the next checkpoint may succeed).
func (r *run) save(ctx context.Context) {
	r.st.UpdatedAt = time.Now().UTC()
	r.st.Counters = RunCounters{RunID: r.st.RunID, Started: r.started, Iterations: r.iterations, ToolCalls: r.toolCalls, Usage: r.usage}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.a.cfg.CheckpointTimeout)
	defer cancel()
	err := r.a.cfg.Store.Save(sctx, r.st)
	switch {
	case errors.Is(err, ErrSessionConflict):
		r.takenOver = true // stops the run at its next checkpoint
		r.emit(EventError, "", map[string]any{"message": "checkpoint refused: another run saved this session meanwhile; this one stops"})
	case err != nil:
		r.emit(EventError, "", map[string]any{"message": "checkpoint failed: " + err.Error()})
	}
}

func (r *run) checkCancel(ctx context.Context) error {
	if r.takenOver {
		return &stop{status: Failed, answer: "Another run took over this session (troy agent resume while it ran?); this one stopped."}
	}
	if reason, ok := r.ctl.Cancelled(); ok {
		return &stop{status: Cancelled, reason: reason}
	}
	return r.contextDone(ctx)
}

// contextDone turns the end of ctx into how the run ends: its deadline is a
// budget (exhausted), anything else a stop from outside (cancelled).
func (r *run) contextDone(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		r.emit(EventBudgetExceeded, "", map[string]any{"which": "deadline"})
		return &stop{status: Exhausted, answer: "Ran out of time: the run's deadline passed before it completed the goal."}
	}
	return &stop{status: Cancelled, reason: "stopped: " + context.Cause(ctx).Error()}
}

// checkBudget runs at the top of every iteration (all bounds) and before
// every LLM call (tokens, time), so no bound is overshot by a whole
// iteration.
func (r *run) checkBudget(top bool) error {
	b := r.a.cfg.Budget
	which := ""
	switch {
	case top && r.iterations >= b.MaxIterations:
		which = fmt.Sprintf("max_iterations=%d", b.MaxIterations)
	case r.usage.Total() >= b.MaxTokens:
		which = fmt.Sprintf("max_tokens=%d", b.MaxTokens)
	case top && r.toolCalls >= b.MaxToolCalls:
		which = fmt.Sprintf("max_tool_calls=%d", b.MaxToolCalls)
	case time.Since(r.started) >= b.MaxWall:
		which = fmt.Sprintf("max_wall_seconds=%g", b.MaxWall.Seconds())
	}
	if which == "" {
		return nil
	}
	r.emit(EventBudgetExceeded, "", map[string]any{"which": which})
	return &stop{status: Exhausted, answer: fmt.Sprintf("Ran out of budget (%s) before completing the goal.", which)}
}

func (r *run) it() *IterationRecord { return &r.st.Iterations[len(r.st.Iterations)-1] }

func (r *run) say(text string) {
	r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "user", Text: text, Iteration: r.st.Iteration})
}

func (r *run) iterate(ctx context.Context) error {
	r.st.Iteration++
	r.iterations++
	r.st.Iterations = append(r.st.Iterations, IterationRecord{Index: r.st.Iteration, StartedAt: time.Now().UTC(),
		ToolCalls: []ToolCallRecord{}, Violations: []Violation{}})
	r.emit(EventIterationStart, "", nil)
	plan, err := r.analyze(ctx)
	if err != nil {
		return err
	}
	call, err := r.act(ctx, plan)
	if err != nil {
		return err
	}
	return r.carryOut(ctx, plan, call)
}

// carryOut is the rest of an iteration once its call is chosen: EXECUTE,
// then OBSERVE (or the end, for submit). A run that goes on after its
// runner died while a call waited for approval starts here again.
func (r *run) carryOut(ctx context.Context, plan *Plan, call llm.ToolCall) error {
	if err := r.execute(ctx, plan, call); err != nil {
		return err
	}
	if sub := r.env.Submitted; sub != nil {
		// The terminal call: no OBSERVE. Its result closes the call in the
		// transcript so the stored conversation stays well formed.
		r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "user", ToolResults: r.st.Pending, Iteration: r.st.Iteration})
		r.st.Pending = nil
		r.it().EndedAt = time.Now().UTC()
		r.emit(EventIterationEnd, "", map[string]any{"duration_s": time.Since(r.it().StartedAt).Seconds()})
		return &stop{status: Status(sub.Status), answer: sub.Answer, sub: sub}
	}
	// Checked before the results move into the conversation, so a stop
	// here leaves them pending for a resume.
	if err := r.checkCancel(ctx); err != nil {
		return err
	}
	if err := r.checkBudget(false); err != nil {
		return err
	}
	eval, err := r.observe(ctx, plan)
	if err != nil {
		return err
	}
	it := r.it()
	it.EndedAt = time.Now().UTC()
	r.emit(EventIterationEnd, "", map[string]any{"duration_s": it.EndedAt.Sub(it.StartedAt).Seconds()})
	r.save(ctx)
	if err := r.afterObserve(plan, eval); err != nil {
		return err
	}
	if n := trailingFailures(r.st.Iterations); n >= r.a.cfg.Budget.MaxConsecutiveFailures {
		return &stop{status: Blocked, answer: fmt.Sprintf("Halted after %d consecutive failed iterations. Last diagnosis: %s", n, eval.Evidence),
			sub: &tools.Submission{Status: string(Blocked), Evidence: []string{}, UnmetRequirements: []string{eval.NextStep}}}
	}
	return nil
}

func trailingFailures(its []IterationRecord) int {
	n := 0
	for i := len(its) - 1; i >= 0; i-- {
		e := its[i].Evaluation
		if e == nil || e.Outcome != "failure" {
			break
		}
		n++
	}
	return n
}

// complete makes one LLM call of a phase: a cancel checkpoint and a budget
// check first, usage and cost after.
func (r *run) complete(ctx context.Context, phase string, withTools bool) (llm.Completion, error) {
	if err := r.checkCancel(ctx); err != nil {
		return llm.Completion{}, err
	}
	if err := r.checkBudget(false); err != nil {
		return llm.Completion{}, err
	}
	if err := r.compact(ctx); err != nil {
		return llm.Completion{}, err
	}
	req := r.request(phase)
	if withTools {
		req.ToolChoice = llm.ToolChoiceRequired
		for _, s := range r.a.cfg.Tools.Specs() {
			req.Tools = append(req.Tools, llm.ToolSpec{Name: s.Name, Description: s.Description, Parameters: s.InputSchema})
		}
	}
	return r.call(ctx, req)
}

// request is a phase's request over the conversation so far.
func (r *run) request(phase string) llm.Request {
	cfg := r.a.cfg
	return llm.Request{Phase: phase, ToolChoice: llm.ToolChoiceNone, MaxTokens: cfg.MaxTokensPerCall,
		System: systemPrompt(r.st.Goal, cfg.Tools.Specs(), skillIndex(cfg.Skills), cfg.ExtraInstructions, r.st.Summary, r.st.Scratchpad),
		Turns:  r.st.Transcript}
}

// call makes one model call, with its events and accounting.
func (r *run) call(ctx context.Context, req llm.Request) (llm.Completion, error) {
	cfg := r.a.cfg
	phase := req.Phase
	model := cfg.Model.Model()
	if err := r.beforeCall(req); err != nil {
		return llm.Completion{}, err
	}
	r.emit(EventLLMRequest, phase, map[string]any{"model": model})
	start := time.Now()
	c, err := cfg.Model.Complete(ctx, req)
	latency := time.Since(start).Milliseconds()
	if err != nil {
		data := map[string]any{"model": model, "latency_ms": latency, "status": "error", "error_type": errorType(err), "status_code": nil}
		var se *llm.StatusError
		if errors.As(err, &se) && se.StatusCode != 0 {
			data["status_code"] = se.StatusCode
		}
		r.emit(EventLLMResponse, phase, data)
		if ctx.Err() != nil {
			return llm.Completion{}, r.contextDone(ctx)
		}
		msg := fmt.Sprintf("The model provider failed during %s: %v", phase, err)
		r.emit(EventError, phase, map[string]any{"message": msg})
		return llm.Completion{}, &stop{status: Failed, answer: msg}
	}
	r.usage = r.usage.Add(c.Usage)
	r.st.Usage = r.st.Usage.Add(c.Usage)
	r.st.UsageByPhase[phase] = r.st.UsageByPhase[phase].Add(c.Usage)
	r.st.CostUSD += c.CostUSD
	r.st.Scratchpad["_cost_usd"] = r.st.CostUSD
	r.emit(EventLLMResponse, phase, map[string]any{"model": model, "latency_ms": latency, "status": "ok",
		"input_tokens": c.Usage.InputTokens, "output_tokens": c.Usage.OutputTokens})
	r.emit(EventCostRecorded, phase, map[string]any{"model": model, "call_usd": round6(c.CostUSD), "run_usd": round6(r.st.CostUSD), "priced": c.Priced})
	if r.st.CostByPhase == nil {
		r.st.CostByPhase = map[string]float64{}
	}
	r.st.CostByPhase[phase] += c.CostUSD
	if err := r.afterCall(model, c.Priced); err != nil {
		return c, err
	}
	return c, nil
}

func round6(f float64) float64 { return float64(int64(f*1e6+0.5)) / 1e6 }

func skillIndex(s Skills) string {
	if s == nil {
		return ""
	}
	return s.Index()
}

// violation records a broken contract and either asks again (closing any
// rejected tool calls so the conversation stays valid) or ends the run.
func (r *run) violation(phase string, reason error, attempt int, rejected []llm.ToolCall) error {
	r.emit(EventContractViolation, phase, map[string]any{"reason": reason.Error(), "attempt": attempt})
	it := r.it()
	it.Violations = append(it.Violations, Violation{Phase: phase, Reason: reason.Error()})
	attempts := r.a.cfg.MaxContractRetries + 1
	if attempt >= attempts {
		r.emit(EventError, phase, map[string]any{"message": "Unrecoverable contract violation: " + reason.Error()})
		if len(rejected) > 0 { // close them anyway: the stored conversation stays valid
			r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "user", ToolResults: notExecutedResults(rejected), Iteration: r.st.Iteration})
		}
		return &stop{status: Failed, answer: fmt.Sprintf("The model could not produce valid %s-phase output after %d attempts: %s", phase, attempts, reason)}
	}
	r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "user", Iteration: r.st.Iteration,
		Text:        fmt.Sprintf(violationPrompt, phase, reason, attempt+1, attempts, feedback(phase, reason.Error())),
		ToolResults: notExecutedResults(rejected)})
	return nil
}

func notExecutedResults(calls []llm.ToolCall) []llm.ToolResult {
	var out []llm.ToolResult
	for _, c := range calls {
		out = append(out, llm.ToolResult{CallID: c.ID, Content: notExecuted, IsError: true})
	}
	return out
}

func (r *run) analyze(ctx context.Context) (*Plan, error) {
	prompt := analyzePrompt
	if n := trailingFailures(r.st.Iterations[:len(r.st.Iterations)-1]); n > 0 {
		prompt += "\n\n" + fmt.Sprintf(blockedHint, n)
	}
	r.say(prompt)
	reg := r.a.cfg.Tools
	for attempt := 1; ; attempt++ {
		c, err := r.complete(ctx, PhaseAnalyze, false)
		if err != nil {
			return nil, err
		}
		// Calls made against tool_choice none are not part of the
		// conversation: nothing would answer them.
		r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "assistant", Text: c.Text, Iteration: r.st.Iteration})
		plan, perr := ParsePlan(c.Text, reg.Has, reg.Names())
		if perr == nil {
			r.it().Plan = plan
			r.emit(EventPlanCreated, PhaseAnalyze, planData(plan))
			r.save(ctx)
			return plan, nil
		}
		if err := r.violation(PhaseAnalyze, perr, attempt, nil); err != nil {
			return nil, err
		}
	}
}

func (r *run) act(ctx context.Context, plan *Plan) (llm.ToolCall, error) {
	r.say(fmt.Sprintf(actPrompt, plan.NextAction.Tool, plan.NextAction.StepID))
	for attempt := 1; ; attempt++ {
		c, err := r.complete(ctx, PhaseAct, true)
		if err != nil {
			return llm.ToolCall{}, err
		}
		r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "assistant", Text: c.Text, ToolCalls: c.ToolCalls, Iteration: r.st.Iteration})
		if verr := CheckToolChoice(c.ToolCalls, plan, r.a.cfg.Tools.Has); verr != nil {
			if err := r.violation(PhaseAct, verr, attempt, c.ToolCalls); err != nil {
				return llm.ToolCall{}, err
			}
			continue
		}
		r.save(ctx)
		return c.ToolCalls[0], nil
	}
}

// PreviewLimit bounds the result text kept in records and events.
const PreviewLimit = 2000

func (r *run) execute(ctx context.Context, plan *Plan, call llm.ToolCall) error {
	b := r.a.cfg.Budget
	if r.toolCalls >= b.MaxToolCalls {
		which := fmt.Sprintf("max_tool_calls=%d", b.MaxToolCalls)
		r.st.Pending = []llm.ToolResult{{CallID: call.ID, Content: "Not executed: the run's tool-call budget is spent.", IsError: true}}
		r.emit(EventBudgetExceeded, PhaseExecute, map[string]any{"which": which})
		return &stop{status: Exhausted, answer: fmt.Sprintf("Ran out of budget (%s) before completing the goal.", which)}
	}
	// a call resumed after an approval wait was counted when first chosen
	if resuming := r.st.Awaiting != nil && r.st.Awaiting.Call.ID == call.ID; !resuming {
		if err := r.beforeTool(call.Name, call.Arguments); err != nil {
			r.st.Pending = []llm.ToolResult{{CallID: call.ID, Content: "Not executed: the circuit breaker stopped the run.", IsError: true}}
			return err
		}
	}
	na := plan.NextAction
	r.emit(EventToolCall, PhaseExecute, map[string]any{"tool": call.Name, "call_id": call.ID, "arguments": r.redact(rawJSON(call.Arguments)),
		"rationale": na.Rationale, "step_id": na.StepID})
	reg, gate, it := r.a.cfg.Tools, r.a.cfg.Gate, r.it()
	emit := func(typ string, data map[string]any) { r.emit(typ, PhaseExecute, data) }
	var res tools.Result
	ran := false
	// Arguments are checked first: nobody is asked to approve a call that
	// could not run (§5.3 #9). Then the guardrails; then the tool.
	verr := reg.Validate(call.Name, call.Arguments)
	var v GateVerdict
	if verr == nil && gate != nil {
		// Kept with the session while a person decides (minutes, maybe):
		// a runner that dies meanwhile leaves the call to the next one,
		// which waits for the same approval.
		r.st.Awaiting = &AwaitingCall{Call: call, Plan: plan}
		// A cancel ends a wait for a person (not a call in flight): the
		// call is then not run, whatever is decided later.
		sctx, stopWait := context.WithCancelCause(ctx)
		unhook := r.ctl.onCancel(func() { stopWait(ErrRunCancelled) })
		v = r.screen(sctx, gate, call, na, emit, func() { r.save(ctx) })
		unhook()
		stopWait(nil)
		if err := r.contextDone(ctx); err != nil {
			return err // undecided: the call stays awaiting
		}
		if err := r.checkCancel(ctx); err != nil {
			r.st.Awaiting = nil
			r.st.Pending = []llm.ToolResult{{CallID: call.ID, Content: "Not executed: the run was cancelled while the call waited for a decision.", IsError: true}}
			return err
		}
	}
	r.st.Awaiting = nil
	if verr != nil {
		res = tools.Result{CallID: call.ID, Tool: call.Name, Err: verr}
	} else if v.Blocked {
		res = tools.Result{CallID: call.ID, Tool: call.Name, Err: v.Err}
	} else {
		res = reg.Invoke(ctx, r.env, tools.Call{ID: call.ID, Name: call.Name, Arguments: call.Arguments})
		ran = true
		r.toolCalls++
		r.st.ToolCallCount++
	}
	text := res.ModelText()
	withheld := false
	if gate != nil && ran {
		var v *GateVerdict
		if text, v = gate.ScreenResult(call.Name, text, emit); v != nil {
			withheld = true
			if v.Record != nil {
				it.SafetyChecks = append(it.SafetyChecks, v.Record)
			}
		}
	}
	preview := clip(text, PreviewLimit)
	rec := ToolCallRecord{CallID: call.ID, Tool: call.Name, Arguments: call.Arguments, Rationale: na.Rationale, StepID: na.StepID,
		OK: res.OK, ResultPreview: preview, ErrorCode: res.ErrorCode(), DurationMS: res.DurationMS, Artifacts: res.Artifacts,
		Executed: ran, Withheld: withheld}
	it.ToolCalls = append(it.ToolCalls, rec)
	data := map[string]any{"tool": call.Name, "call_id": call.ID, "ok": res.OK, "error_code": nil,
		"duration_ms": res.DurationMS, "truncated": res.Truncated, "preview": r.redact(preview), "executed": ran, "withheld": withheld}
	if !res.OK {
		data["error_code"] = string(res.Err.Code)
	}
	r.emit(EventToolResult, PhaseExecute, data)
	r.st.Pending = []llm.ToolResult{{CallID: call.ID, Content: text, IsError: !res.OK}}
	if sub := r.env.Submitted; sub != nil {
		r.st.Final = sub // kept with the checkpoint: a crash now still ends as submitted
	}
	r.save(ctx)
	return nil
}

func (r *run) redact(v any) any {
	if r.a.cfg.Redact == nil {
		return v
	}
	return r.a.cfg.Redact(v)
}

// screen asks the gate about a call; without a gate everything runs.
func (r *run) screen(ctx context.Context, gate Gate, call llm.ToolCall, na NextAction, emit func(string, map[string]any), beforeWait func()) GateVerdict {
	if gate == nil {
		return GateVerdict{}
	}
	spec, _ := r.a.cfg.Tools.Spec(call.Name)
	v := gate.ScreenCall(ctx, GateCall{RunID: r.st.RunID, SessionID: r.st.SessionID, Agent: r.a.cfg.Name, Goal: r.st.Goal,
		Iteration: r.st.Iteration, CallID: call.ID, Tool: call.Name, Safety: spec.Safety, Arguments: call.Arguments, Rationale: na.Rationale,
		History: append([]*trace.Step(nil), r.history...), Emit: emit, BeforeWait: beforeWait})
	if v.Record != nil {
		it := r.it()
		it.SafetyChecks = append(it.SafetyChecks, v.Record)
	}
	r.idle += time.Duration(v.WaitMS) * time.Millisecond
	if v.Blocked && v.Err == nil {
		v.Err = tools.Errorf(tools.PolicyViolation, "`%s` was blocked by a guardrail.", call.Name)
	}
	return v
}

func (r *run) observe(ctx context.Context, plan *Plan) (*Evaluation, error) {
	failed := ""
	for _, p := range r.st.Pending {
		if p.IsError {
			failed = p.CallID
		}
	}
	r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "user", Text: observePrompt, ToolResults: r.st.Pending, Iteration: r.st.Iteration})
	r.st.Pending = nil
	for attempt := 1; ; attempt++ {
		c, err := r.complete(ctx, PhaseObserve, false)
		if err != nil {
			return nil, err
		}
		r.st.Transcript = append(r.st.Transcript, llm.Turn{Role: "assistant", Text: c.Text, Iteration: r.st.Iteration})
		ev, perr := ParseEvaluation(c.Text, plan)
		if perr == nil && failed != "" && (ev.Outcome == "success" || len(ev.CompletedStepIDs) > 0) {
			// The call failed: it cannot have succeeded or completed a step.
			perr = fmt.Errorf("the call failed (see its result), so the outcome cannot be success nor complete a step")
		}
		if perr == nil {
			r.it().Evaluation = ev
			r.emit(EventEvaluationCreated, PhaseObserve, evalData(ev))
			return ev, nil
		}
		if err := r.violation(PhaseObserve, perr, attempt, nil); err != nil {
			return nil, err
		}
	}
}

// finish ends every run the same way: final state saved, run.end emitted.
func (r *run) finish(ctx context.Context, s *stop) Result {
	st := r.st
	st.Status = s.status
	sub := s.sub
	switch s.status {
	case Cancelled:
		if s.reason != "" {
			s.answer = "Run cancelled: " + s.reason
		} else {
			s.answer = "Run cancelled."
		}
		r.emit(EventRunCancelled, "", map[string]any{"reason": s.reason})
	}
	if sub == nil || sub.Answer == "" {
		answer := s.answer
		if answer == "" {
			answer = "The run ended without a submission."
		}
		unmet := []string{st.Goal}
		if sub != nil && len(sub.UnmetRequirements) > 0 {
			unmet = sub.UnmetRequirements
		}
		sub = &tools.Submission{Answer: answer, Status: string(Blocked), Confidence: 0, Evidence: []string{}, UnmetRequirements: unmet}
	}
	st.Final, st.FinalAnswer = sub, sub.Answer
	res := Result{Status: st.Status, Answer: sub.Answer, Confidence: sub.Confidence, Evidence: orEmpty(sub.Evidence),
		UnmetRequirements: orEmpty(sub.UnmetRequirements), Iterations: st.Iteration, TotalTokens: st.Usage.Total(),
		CostUSD: round6(st.CostUSD), DurationS: time.Since(r.started).Seconds(), SessionID: st.SessionID, RunID: st.RunID}
	r.save(ctx)
	r.emit(EventRunEnd, "", map[string]any{"status": string(res.Status), "answer": res.Answer, "iterations": res.Iterations,
		"total_tokens": res.TotalTokens, "cost_usd": res.CostUSD, "duration_s": res.DurationS,
		"confidence": res.Confidence, "evidence": res.Evidence, "unmet_requirements": res.UnmetRequirements})
	res.Problems = r.problems
	res.IdleS = r.idle.Seconds()
	return res
}

// closeDangling answers tool calls left without a result by a crash
// between ACT and EXECUTE's checkpoint, so a resumed conversation is one a
// provider accepts.
func closeDangling(st *State) {
	answered := map[string]bool{}
	if st.Awaiting != nil {
		answered[st.Awaiting.Call.ID] = true // it will be decided and run
	}
	for _, p := range st.Pending {
		answered[p.CallID] = true
	}
	for _, t := range st.Transcript {
		for _, res := range t.ToolResults {
			answered[res.CallID] = true
		}
	}
	for _, t := range st.Transcript {
		for _, c := range t.ToolCalls {
			if !answered[c.ID] {
				st.Pending = append(st.Pending, llm.ToolResult{CallID: c.ID, IsError: true,
					Content: "The run stopped while this call was being made; it may or may not have taken effect. Check before repeating it."})
				answered[c.ID] = true
			}
		}
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// errorType names the innermost error's type, for telemetry.
func errorType(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}
