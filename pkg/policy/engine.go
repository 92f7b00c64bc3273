package policy

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/troy-audit/troy/pkg/detect"
	"github.com/troy-audit/troy/pkg/trace"
)

// Env is what a condition sees for one step. A typed struct, not a map: expr
// evaluates field access on structs several times faster.
type Env struct {
	Step      *trace.Step   `expr:"step"`
	Steps     []*trace.Step `expr:"steps"`
	StepIndex int           `expr:"step_index"`
	PrevSteps []*trace.Step `expr:"prev_steps"`
	NextSteps []*trace.Step `expr:"next_steps"`
	// The adjacent steps, nil at the ends. Typed `any` so that
	// `next_step?.type == 'x'` compares nil instead of failing on it.
	PrevStep any            `expr:"prev_step"`
	NextStep any            `expr:"next_step"`
	Trace    map[string]any `expr:"trace"`
	Agent    map[string]any `expr:"agent"`
	// Meter bounds the run; conditions reach it only through the calls the
	// meter patch adds.
	Meter *meter `expr:"__meter"`
}

// Violation is one rule firing on one step.
type Violation struct {
	RuleID      string `json:"rule_id"`
	StepID      string `json:"step_id"`
	StepIndex   int    `json:"step_index"`
	Severity    string `json:"severity"`
	Weight      int    `json:"weight"`
	Description string `json:"description"`
}

// RuleError records a condition that failed to evaluate on a step.
type RuleError struct {
	RuleID    string `json:"rule_id"`
	StepID    string `json:"step_id"`
	StepIndex int    `json:"step_index"`
	Error     string `json:"error"`
}

// Result is a policy evaluated over one trace.
type Result struct {
	Violations []Violation `json:"violations"`
	RuleErrors []RuleError `json:"rule_errors"`
}

// maxRuleErrors bounds what one broken rule can add to a report. It is per
// rule, so one noisy rule never hides another's error (the guard blocks on
// any of them).
const maxRuleErrors = 100

type compiledRule struct {
	Rule
	program *vm.Program
	guard   stepGuard
	source  rewritten // to point runtime errors at the user's text
	cost    cost      // how its runs are timed against the budget
	decide  string    // when its verdict is certain in a streamed trace
	// readsInfo: the condition reads the trace's or agent's name or
	// metadata, which a streamed trace may only give at its end.
	readsInfo bool
}

// Engine is a policy compiled once, safe for concurrent use.
type Engine struct {
	policy      *Policy
	hash        string
	rules       []compiledRule
	traceGuards bool          // some rule can be ruled out once per trace
	budget      time.Duration // per costly rule, per trace
	memory      int64         // bytes one run may build
}

// Options tune an engine.
type Options struct {
	// Budget is how long one rule may run on one trace before it is
	// stopped with a rule error (DefaultBudget when zero).
	Budget time.Duration
	// MemoryBudget is how many bytes one run of a condition may build
	// (DefaultMemoryBudget when zero).
	MemoryBudget int64
}

// Compile checks and compiles every condition of a policy. A condition that
// does not compile, or could cost too much, is reported with its rule id
// (and, for syntax and type errors, its line and column).
func Compile(p *Policy) (*Engine, error) { return CompileWith(p, Options{}) }

// CompileWith is Compile with options.
func CompileWith(p *Policy, o Options) (*Engine, error) {
	e := &Engine{policy: p, hash: p.Hash(), budget: o.Budget, memory: o.MemoryBudget}
	if e.budget <= 0 {
		e.budget = DefaultBudget
	}
	if e.memory <= 0 {
		e.memory = DefaultMemoryBudget
	}
	var probs []Problem
	add := func(i int, pr Problem) {
		pr.rule, pr.field = i+1, "condition"
		pr.FileLine = p.lines.conditionLine(i, pr.Line)
		probs = append(probs, pr)
	}
	for i, r := range p.Rules {
		prog, rw, prob := compileCondition(r)
		if prob != nil {
			add(i, *prob)
			continue
		}
		c, err := safetyCheck(prog.Node())
		if err != nil {
			add(i, Problem{RuleID: r.RuleID, Field: "condition", Message: err.Error()})
			continue
		}
		cr := compiledRule{Rule: r, program: prog, guard: guardOf(prog.Node()), source: rw, cost: c, decide: decideWhen(prog.Node()),
			readsInfo: mentions(prog.Node(), infoNames)}
		e.traceGuards = e.traceGuards || len(cr.guard.wholes) > 0
		e.rules = append(e.rules, cr)
	}
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return e, nil
}

func compileCondition(r Rule) (*vm.Program, rewritten, *Problem) {
	rw, err := rewrite(r.Condition)
	if err != nil {
		return nil, rw, conditionProblem(r, err, rewritten{src: r.Condition, origin: identity(r.Condition)})
	}
	// Type-check the condition as the user wrote it: the meter patch wraps
	// loop bodies and `+` in calls typed `any`, which would turn type
	// errors into runtime errors.
	var patternErrs []error
	_, err = expr.Compile(rw.src, compileOptions(false, &patternErrs)...)
	if err == nil {
		patternErrs = nil
		var prog *vm.Program
		prog, err = expr.Compile(rw.src, compileOptions(true, &patternErrs)...)
		if err == nil && len(patternErrs) == 0 {
			return prog, rw, nil
		}
	}
	if err == nil {
		err = patternErrs[0]
	}
	return nil, rw, conditionProblem(r, err, rw)
}

// compileOptions are the expr options of a condition: the helpers as users
// call them (metered false, for type checking), or with the run's meter
// first and the meter patch applied (the program that runs).
func compileOptions(metered bool, patternErrs *[]error) []expr.Option {
	type helper struct {
		name         string
		fn           func(...any) (any, error)
		plain, meter []any
	}
	helpers := []helper{
		// The pattern parameter is `any`: patternCompiler swaps a constant
		// pattern for its compiled matcher before type checking.
		{matchesFunc, matches, []any{new(func(any, any) bool)}, []any{new(func(*meter, any, any) bool)}},
		{"text", text, []any{new(func(any) string)}, []any{new(func(*meter, any) string)}},
		{"json", jsonHelper, []any{new(func(any) any)}, []any{new(func(*meter, any) any)}},
		{"pii", detector(detect.PII), []any{new(func(any) []any)}, []any{new(func(*meter, any) []any)}},
		{"secrets", detector(detect.Secrets), []any{new(func(any) []any)}, []any{new(func(*meter, any) []any)}},
		{"injection", detector(detect.Injection), []any{new(func(any) []any)}, []any{new(func(*meter, any) []any)}},
		{"urls", detector(detect.URLs), []any{new(func(any) []any)}, []any{new(func(*meter, any) []any)}},
		// expr's builtins that can build without bound, sized before they do
		{"toJSON", toJSONHelper, []any{new(func(any) string)}, []any{new(func(*meter, any) string)}},
		{"repeat", repeatHelper, []any{new(func(string, int) string)}, []any{new(func(*meter, string, int) string)}},
		{"replace", replaceHelper, []any{new(func(string, string, string) string)}, []any{new(func(*meter, string, string, string) string)}},
		{"join", joinHelper, []any{new(func(any) string), new(func(any, string) string)},
			[]any{new(func(*meter, any) string), new(func(*meter, any, string) string)}},
	}
	opts := []expr.Option{
		expr.Env(Env{}), // a value, so names compile to field loads; runs pass *Env
		expr.AsBool(),
		expr.DisableBuiltin("get"),
		expr.Function("get", get, new(func(any, string) any), new(func(any, string, any) any)),
		// Python's semantics, for policies translated from troy's predecessor
		expr.Function("py_in", pyIn, new(func(any, any) bool)),
		expr.Function("py_str", pyStr, new(func(any) string)),
		expr.DisableBuiltin("repeat"),
		expr.DisableBuiltin("replace"),
		expr.DisableBuiltin("join"),
		expr.DisableBuiltin("toJSON"),
	}
	for _, h := range helpers {
		types := h.plain
		if metered {
			types = h.meter
		}
		opts = append(opts, expr.Function(h.name, h.fn, types...))
	}
	opts = append(opts, expr.Patch(patternCompiler{errs: patternErrs}))
	if metered {
		opts = append(opts,
			expr.Function(tickName, tick, new(func(*meter, any) any)),
			expr.Function(heavyTickName, heavyTick, new(func(*meter, any) any)),
			expr.Patch(meterPatch{wrapped: map[*ast.PredicateNode]bool{}}))
	}
	return opts
}

// patternCompiler compiles constant patterns once, at load: a bad one is a
// policy error there, a good one is never looked up again.
type patternCompiler struct{ errs *[]error }

func (c patternCompiler) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok || len(call.Arguments) != 2 {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != matchesFunc {
		return
	}
	s, ok := call.Arguments[1].(*ast.StringNode)
	if !ok {
		return
	}
	// '\b' in quotes is a backspace, not a word boundary (\a, \f, \v
	// alike): valid escapes that silently change what the pattern means
	if i := strings.IndexAny(s.Value, "\a\b\f\v"); i >= 0 {
		what := map[byte]string{'\a': `\a is a bell character`, '\b': `\b is a backspace, not a word boundary`,
			'\f': `\f is a form feed`, '\v': `\v is a vertical tab`}[s.Value[i]]
		*c.errs = append(*c.errs, &file.Error{Location: s.Location(),
			Message: "in '…' or \"…\" " + what + ": write the pattern in backquotes, e.g. matches(x, `\\bdrop\\b`)"})
		return
	}
	m, err := NewMatcher(s.Value)
	if err != nil {
		*c.errs = append(*c.errs, &file.Error{Location: s.Location(),
			Message: fmt.Sprintf("bad regular expression %q: %v", s.Value, errors.Unwrap(err))})
		return
	}
	ast.Patch(&call.Arguments[1], &ast.ConstantNode{Value: m})
}

func identity(s string) []int {
	n := len([]rune(s))
	out := make([]int, n+1)
	for i := range out {
		out[i] = i
	}
	return out
}

func conditionProblem(r Rule, err error, rw rewritten) *Problem {
	prob := &Problem{RuleID: r.RuleID, Field: "condition", Message: err.Error()}
	if at := rw.locate(err, r.Condition); at != nil {
		prob.Message = at.Message + at.Snippet
		prob.Line, prob.Column = at.Line, at.Column+1
	}
	if strings.Contains(prob.Message, "invalid char escape") {
		prob.Message += "\n   (write regular expressions in backquotes, e.g. matches(x, `\\s+`): in '…' a backslash starts a string escape)"
	}
	if m := unknownName.FindStringSubmatch(prob.Message); m != nil {
		if near := closest(m[1], conditionNames); near != "" {
			prob.Message += "\n   (did you mean " + near + "?)"
		}
	}
	return prob
}

var unknownName = regexp.MustCompile(`unknown name ([A-Za-z_][A-Za-z0-9_]*)`)

// conditionNames are the names a condition may use: the variables and
// troy's helpers (expr's builtins have their own messages).
var conditionNames = []string{"step", "steps", "step_index", "prev_steps", "next_steps", "prev_step", "next_step", "trace", "agent",
	"get", "matches", "text", "json", "pii", "secrets", "injection", "urls", "any_step", "any_next", "any_prev", "py_in", "py_str"}

// locate re-points an expr error at the user's original condition.
func (r rewritten) locate(err error, original string) *file.Error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return nil
	}
	at := &file.Error{Location: file.Location{From: r.originalOffset(fe.From)}, Message: fe.Message}
	return at.Bind(file.NewSource(original))
}

// DecideWhen says, for each rule in policy order, when its verdict on a step
// is certain while a trace streams in: DecideNow, DecideWhenTrue or
// DecideAtEnd.
func (e *Engine) DecideWhen() []string {
	out := make([]string, len(e.rules))
	for i, r := range e.rules {
		out[i] = r.decide
	}
	return out
}

// ReadsTraceInfo says, for each rule in policy order, whether its condition
// reads `trace` or `agent` (ids, names, metadata): while a trace streams
// in, such a rule waits for the end unless the metadata was given up front.
func (e *Engine) ReadsTraceInfo() []bool {
	out := make([]bool, len(e.rules))
	for i, r := range e.rules {
		out[i] = r.readsInfo
	}
	return out
}

// Stepwise evaluates single rules on single steps of one trace, reusing
// one environment: a streamer calls it for every step it decides. Call
// Reset after the trace's steps or metadata change. Not safe for
// concurrent use.
type Stepwise struct {
	e       *Engine
	t       *trace.Trace
	env     *Env
	machine vm.VM
}

// Stepwise starts a step-by-step evaluation of t.
func (e *Engine) Stepwise(t *trace.Trace) *Stepwise {
	s := &Stepwise{e: e}
	s.Reset(t)
	return s
}

// Reset points the evaluation at t as it is now.
func (s *Stepwise) Reset(t *trace.Trace) {
	s.t, s.env = t, newEnv(t)
}

// RulesOut reports whether the rule's cheap per-step guard already rules
// step i out (the condition cannot hold there, whatever else arrives).
func (s *Stepwise) RulesOut(rule, i int) bool {
	return s.e.rules[rule].guard.skips(i, s.t.Steps[i])
}

// Rule runs rule (its index in the policy) on step i within the rule's
// budget, with the trace as it is in scope.
func (s *Stepwise) Rule(rule, i int) (Violation, bool, *RuleError) {
	r := s.e.rules[rule]
	env, t := s.env, s.t
	env.at(t, i)
	st := t.Steps[i]
	if r.guard.skipsTrace(env) || r.guard.skips(i, st) {
		return Violation{}, false, nil
	}
	if r.guard.complete {
		return r.violation(st, i), true, nil
	}
	env.Meter = nil
	if r.cost != costFlat {
		env.Meter = newMeter(context.Background(), s.e.budget, s.e.memory)
		env.Meter.start(time.Now(), s.e.budget)
	}
	out, err := s.machine.Run(r.program, env)
	if err != nil {
		return Violation{}, false, &RuleError{RuleID: r.RuleID, StepID: st.StepID, StepIndex: i, Error: r.errorText(err)}
	}
	if fired, _ := out.(bool); fired {
		return r.violation(st, i), true, nil
	}
	return Violation{}, false, nil
}

// Policy returns the policy the engine was compiled from.
func (e *Engine) Policy() *Policy { return e.policy }

// Hash is the content hash of the compiled policy.
func (e *Engine) Hash() string { return e.hash }

// Evaluate runs every rule on every step of a trace. A rule that errors on a
// step is recorded in RuleErrors and evaluation goes on.
func (e *Engine) Evaluate(t *trace.Trace) Result { return e.EvaluateContext(context.Background(), t) }

// EvaluateContext is Evaluate, stopping the rules still running when ctx
// ends (each gets a rule error saying so).
func (e *Engine) EvaluateContext(ctx context.Context, t *trace.Trace) Result {
	return e.evaluate(ctx, t, 0, len(t.Steps))
}

// EvaluateStep runs every rule on step i alone, with the whole trace in
// scope: what the guard asks of a proposed action (the last step).
func (e *Engine) EvaluateStep(t *trace.Trace, i int) Result {
	return e.EvaluateStepContext(context.Background(), t, i)
}

// EvaluateStepContext is EvaluateStep bounded by ctx too.
func (e *Engine) EvaluateStepContext(ctx context.Context, t *trace.Trace, i int) Result {
	if i < 0 || i >= len(t.Steps) {
		return Result{Violations: []Violation{}, RuleErrors: []RuleError{}}
	}
	return e.evaluate(ctx, t, i, i+1)
}

// evaluate runs the rules on steps [from, to). A costly rule is timed
// across the whole trace; once it spends its budget (or its run builds too
// much, or ctx ends) it is stopped with one rule error and skipped for the
// rest of the trace.
func (e *Engine) evaluate(ctx context.Context, t *trace.Trace, from, to int) Result {
	res := Result{Violations: []Violation{}, RuleErrors: []RuleError{}}
	env := pooledEnv(t)
	defer releaseEnv(env)
	m := newMeter(ctx, e.budget, e.memory)
	env.Meter = m
	var machine vm.VM
	rules := e.rules
	if e.traceGuards {
		rules = make([]compiledRule, 0, len(e.rules))
		for _, r := range e.rules {
			if !r.guard.skipsTrace(env) {
				rules = append(rules, r)
			}
		}
	}
	state := make([]ruleState, len(rules))
	// At most one clock read per run: a run starts when the previous timed
	// one ended (the cheap rules between them cost microseconds, and count
	// toward the next timed rule), or, on a new step, when its first timed
	// rule starts (a step whose timed rules its guards all skip reads no
	// clock). A helper-only rule's run that did little work (a regexp over
	// one step's input) is not timed at all.
	var last time.Time
	for i := from; i < to; i++ {
		s := t.Steps[i]
		env.at(t, i)
		cancelled := ctx.Err() != nil
		clocked := false
		for j, r := range rules {
			if state[j].stopped || r.guard.skips(i, s) {
				continue
			}
			if cancelled {
				state[j].stopped = true
				res.RuleErrors = append(res.RuleErrors, RuleError{RuleID: r.RuleID, StepID: s.StepID, StepIndex: i,
					Error: "stopped: the evaluation was cancelled (" + context.Cause(ctx).Error() + ")"})
				continue
			}
			if r.guard.complete { // the guard is the whole condition, and it passed
				res.Violations = append(res.Violations, r.violation(s, i))
				continue
			}
			if r.cost != costFlat {
				if !clocked {
					last, clocked = time.Now(), true
				}
				m.start(last, e.budget-state[j].spent)
			}
			out, err := machine.Run(r.program, env)
			if r.cost == costLoops || r.cost == costHelpers && (m.runWork >= cheapRun || err != nil) {
				now := time.Now()
				state[j].spent += now.Sub(last)
				last = now
				var be *BudgetError
				if err != nil {
					be = budgetError(err)
				}
				if be != nil || state[j].spent > e.budget {
					state[j].stopped = true
					msg := fmt.Sprintf("stopped after %s on this trace, over the %s budget: its cost grows with the trace's length; simplify the condition",
						state[j].spent.Round(time.Millisecond), e.budget)
					if be != nil && be.Kind != "time" {
						msg = be.Detail
					}
					res.RuleErrors = append(res.RuleErrors, RuleError{RuleID: r.RuleID, StepID: s.StepID, StepIndex: i, Error: msg})
					continue
				}
			}
			if err != nil {
				if state[j].errors++; state[j].errors <= maxRuleErrors {
					res.RuleErrors = append(res.RuleErrors, RuleError{RuleID: r.RuleID, StepID: s.StepID, StepIndex: i, Error: r.errorText(err)})
				}
				continue
			}
			if fired, _ := out.(bool); fired {
				res.Violations = append(res.Violations, r.violation(s, i))
			}
		}
	}
	for j, st := range state {
		if n := st.errors; n > maxRuleErrors {
			last := res.RuleErrors[len(res.RuleErrors)-1]
			res.RuleErrors = append(res.RuleErrors, RuleError{RuleID: rules[j].RuleID, StepID: last.StepID, StepIndex: last.StepIndex,
				Error: fmt.Sprintf("… and %d more errors of this rule on this trace (the first %d are listed)", n-maxRuleErrors, maxRuleErrors)})
		}
	}
	return res
}

// ruleState is what one evaluation knows of a rule so far.
type ruleState struct {
	spent   time.Duration // timed runs on this trace
	stopped bool          // by a bound: skipped from then on
	errors  int
}

// budgetError is the bound that stopped a run, or nil: the meter's, or
// expr's own allocation budget.
func budgetError(err error) *BudgetError {
	var be *BudgetError
	if errors.As(err, &be) {
		return be
	}
	if strings.Contains(err.Error(), "memory budget exceeded") {
		return &BudgetError{Kind: "memory", Detail: "stopped: it allocated over expr's memory budget in one run (ranges, lists and maps it built); iterate smaller collections"}
	}
	return nil
}

func newEnv(t *trace.Trace) *Env {
	env := &Env{Trace: make(map[string]any, 3), Agent: make(map[string]any, 2)}
	env.fill(t)
	return env
}

func (env *Env) fill(t *trace.Trace) {
	meta := metadataOrEmpty(t.Metadata)
	env.Steps = t.Steps
	env.Trace["trace_id"], env.Trace["agent_name"], env.Trace["metadata"] = t.TraceID, t.AgentName, meta
	env.Agent["name"], env.Agent["metadata"] = t.AgentName, meta
}

// envs are reused between evaluations: building one (its two maps) was a
// third of a guard check's allocations. A condition cannot change an env,
// and nothing an evaluation returns points into it.
var envs = sync.Pool{New: func() any {
	return &Env{Trace: make(map[string]any, 3), Agent: make(map[string]any, 2)}
}}

func pooledEnv(t *trace.Trace) *Env {
	env := envs.Get().(*Env)
	env.fill(t)
	return env
}

// releaseEnv returns an env to the pool without what it pointed at, so a
// pooled env keeps no trace alive.
func releaseEnv(env *Env) {
	tr, ag := env.Trace, env.Agent
	clear(tr)
	clear(ag)
	*env = Env{Trace: tr, Agent: ag}
	envs.Put(env)
}

// at points the env at step i.
func (env *Env) at(t *trace.Trace, i int) {
	env.Step, env.StepIndex = t.Steps[i], i
	env.PrevSteps, env.NextSteps = t.Steps[:i], t.Steps[i+1:]
	env.PrevStep, env.NextStep = nil, nil
	if i > 0 {
		env.PrevStep = t.Steps[i-1]
	}
	if i+1 < len(t.Steps) {
		env.NextStep = t.Steps[i+1]
	}
}

func (r compiledRule) violation(s *trace.Step, i int) Violation {
	return Violation{RuleID: r.RuleID, StepID: s.StepID, StepIndex: i, Severity: r.Severity, Weight: r.WeightOrDefault(), Description: r.Description}
}

// errorText is a runtime error pointed at the user's condition.
func (r compiledRule) errorText(err error) string {
	if at := r.source.locate(err, r.Condition); at != nil {
		return fmt.Sprintf("%s (line %d, column %d)%s", at.Message, at.Line, at.Column+1, at.Snippet)
	}
	return err.Error()
}

// noMetadata stands for a trace without metadata: conditions read it, none
// can write it.
var noMetadata = map[string]any{}

func metadataOrEmpty(m map[string]any) map[string]any {
	if m == nil {
		return noMetadata
	}
	return m
}
