package policy

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/troy-audit/troy/pkg/trace"
)

// Env is what a condition sees for one step. A typed struct, not a map: expr
// evaluates field access on structs several times faster.
type Env struct {
	Step      *trace.Step    `expr:"step"`
	Steps     []*trace.Step  `expr:"steps"`
	StepIndex int            `expr:"step_index"`
	PrevSteps []*trace.Step  `expr:"prev_steps"`
	NextSteps []*trace.Step  `expr:"next_steps"`
	Trace     map[string]any `expr:"trace"`
	Agent     map[string]any `expr:"agent"`
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

// maxRuleErrors bounds what one broken rule can add to a report.
const maxRuleErrors = 100

type compiledRule struct {
	Rule
	program *vm.Program
}

// Engine is a policy compiled once, safe for concurrent use.
type Engine struct {
	policy *Policy
	hash   string
	rules  []compiledRule
}

// Compile checks and compiles every condition of a policy. A condition that
// does not compile is reported with its rule id and its line and column.
func Compile(p *Policy) (*Engine, error) {
	e := &Engine{policy: p, hash: p.Hash()}
	var probs []Problem
	for _, r := range p.Rules {
		prog, prob := compileCondition(r)
		if prob != nil {
			probs = append(probs, *prob)
			continue
		}
		e.rules = append(e.rules, compiledRule{Rule: r, program: prog})
	}
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return e, nil
}

func compileCondition(r Rule) (*vm.Program, *Problem) {
	rw, err := rewrite(r.Condition)
	if err != nil {
		return nil, conditionProblem(r, err, rewritten{src: r.Condition, origin: identity(r.Condition)})
	}
	var patternErrs []error
	prog, err := expr.Compile(rw.src,
		expr.Env(&Env{}),
		expr.AsBool(),
		expr.DisableBuiltin("get"),
		expr.Function("get", get,
			new(func(any, string) any),
			new(func(any, string, any) any)),
		expr.Function(matchesFunc, matches, new(func(any, string) bool)),
		expr.Patch(patternChecker{errs: &patternErrs}),
	)
	if err == nil && len(patternErrs) > 0 {
		err = patternErrs[0]
	}
	if err != nil {
		return nil, conditionProblem(r, err, rw)
	}
	return prog, nil
}

// patternChecker rejects bad constant regular expressions at load instead of
// on every step.
type patternChecker struct{ errs *[]error }

func (c patternChecker) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok || len(call.Arguments) != 2 {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != matchesFunc {
		return
	}
	if s, ok := call.Arguments[1].(*ast.StringNode); ok {
		if _, err := regexp.Compile("(?i)" + s.Value); err != nil {
			fe := &file.Error{Location: s.Location(), Message: fmt.Sprintf("bad regular expression %q: %v", s.Value, err)}
			*c.errs = append(*c.errs, fe)
		}
	}
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
	var fe *file.Error
	if errors.As(err, &fe) {
		at := &file.Error{Location: file.Location{From: rw.originalOffset(fe.From)}, Message: fe.Message}
		at.Bind(file.NewSource(r.Condition))
		prob.Message = at.Message + at.Snippet
		prob.Line, prob.Column = at.Line, at.Column+1
	}
	return prob
}

// Policy returns the policy the engine was compiled from.
func (e *Engine) Policy() *Policy { return e.policy }

// Hash is the content hash of the compiled policy.
func (e *Engine) Hash() string { return e.hash }

// Evaluate runs every rule on every step of a trace. A rule that errors on a
// step is recorded in RuleErrors and evaluation goes on.
func (e *Engine) Evaluate(t *trace.Trace) Result {
	res := Result{Violations: []Violation{}, RuleErrors: []RuleError{}}
	info := map[string]any{"trace_id": t.TraceID, "agent_name": t.AgentName, "metadata": metadataOrEmpty(t.Metadata)}
	agent := map[string]any{"name": t.AgentName, "metadata": metadataOrEmpty(t.Metadata)}
	env := &Env{Steps: t.Steps, Trace: info, Agent: agent}
	var machine vm.VM
	for i, s := range t.Steps {
		env.Step, env.StepIndex = s, i
		env.PrevSteps, env.NextSteps = t.Steps[:i], t.Steps[i+1:]
		for _, r := range e.rules {
			out, err := machine.Run(r.program, env)
			if err != nil {
				if len(res.RuleErrors) < maxRuleErrors {
					res.RuleErrors = append(res.RuleErrors, RuleError{RuleID: r.RuleID, StepID: s.StepID, StepIndex: i, Error: err.Error()})
				}
				continue
			}
			if fired, _ := out.(bool); fired {
				res.Violations = append(res.Violations, Violation{
					RuleID: r.RuleID, StepID: s.StepID, StepIndex: i,
					Severity: r.Severity, Weight: r.WeightOrDefault(), Description: r.Description,
				})
			}
		}
	}
	return res
}

func metadataOrEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
