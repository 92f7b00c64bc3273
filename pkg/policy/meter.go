package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/expr-lang/expr/ast"

	"github.com/troy-audit/troy/pkg/trace"
)

// A condition is bounded from inside the expr VM: every loop body, every
// `+` and every costly helper goes through the meter of the run, which
// stops the run (with an error naming the bound) once the rule's time on
// this trace, the memory its run has built, or the caller's context is
// spent. expr's own memory budget still bounds ranges and literals.

// DefaultMemoryBudget is how many bytes of strings and lists one run of a
// condition may build (text, joins, concatenations, repeats) before it is
// stopped with a rule error.
const DefaultMemoryBudget = 256 << 20

// Names the meter patch adds to conditions; users cannot write them (the
// rewrite refuses identifiers starting with "__").
const (
	meterName     = "__meter"
	tickName      = "__tick"
	heavyTickName = "__tick_heavy"
)

// Work is counted in units of about a byte of text scanned or built; a
// loop iteration counts iterationWork. The clock is read once checkWork
// units have passed since the last read, so cheap runs never read it.
const (
	iterationWork = 128
	checkWork     = 64 << 10
	// cheapRun is the work under which a helper-only run is not timed:
	// microseconds, however many steps it runs on.
	cheapRun = 16 << 10
)

// bigValue is the size from which a string a loop body or `+` makes is
// counted against the memory budget (smaller ones are already in the trace
// or too small to matter).
const bigValue = 1 << 10

// BudgetError is a run stopped by a bound.
type BudgetError struct {
	Kind   string // "time", "memory" or "cancelled"
	Detail string
}

func (e *BudgetError) Error() string { return e.Detail }

// ErrBudget is matched by errors.Is for every *BudgetError.
var ErrBudget = errors.New("evaluation budget spent")

func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// meter bounds the runs of the conditions evaluated on one trace. It is not
// safe for concurrent use: each evaluation has its own.
type meter struct {
	ctx       context.Context
	deadline  time.Time // of the rule now running
	budget    time.Duration
	maxBytes  int64
	work      int   // units since the clock was last read
	runWork   int   // units in the current run
	bytes     int64 // built by the current run
	stop      *BudgetError
	memo      map[textKey]string // text() of step lists, per trace
	memoBytes int
}

type textKey struct {
	first *trace.Step
	n     int
}

// memoMaxTextBytes bounds the text() results one trace evaluation keeps.
const memoMaxTextBytes = 64 << 20

func newMeter(ctx context.Context, budget time.Duration, maxBytes int64) *meter {
	return &meter{ctx: ctx, budget: budget, maxBytes: maxBytes}
}

// start readies the meter for one run, begun at now, of a rule that has
// left time left.
func (m *meter) start(now time.Time, left time.Duration) {
	m.deadline = now.Add(left)
	m.bytes, m.work, m.runWork, m.stop = 0, 0, 0, nil
}

// check stops the run when a bound is spent.
func (m *meter) check() error {
	switch {
	case m.stop != nil:
		return m.stop
	case m.bytes > m.maxBytes:
		m.stop = &BudgetError{Kind: "memory", Detail: fmt.Sprintf(
			"stopped: it built more than %d MiB in one run, over the memory budget; avoid repeat(), join() and + over whole traces", m.maxBytes>>20)}
	case m.ctx.Err() != nil:
		m.stop = &BudgetError{Kind: "cancelled", Detail: "stopped: the evaluation was cancelled (" + context.Cause(m.ctx).Error() + ")"}
	case time.Now().After(m.deadline):
		m.stop = &BudgetError{Kind: "time", Detail: fmt.Sprintf(
			"stopped: over the %s budget on this trace: its cost grows with the trace's length; simplify the condition", m.budget)}
	default:
		return nil
	}
	return m.stop
}

// spend counts work about to be done, and reads the clock when enough has
// been done since the last read.
func (m *meter) spend(work int) error {
	if m.stop != nil {
		return m.stop
	}
	m.runWork += work
	if m.work += work; m.work < checkWork {
		return nil
	}
	m.work = 0
	return m.check()
}

// grow counts n bytes a helper is about to build, refusing them when they
// would pass the budget.
func (m *meter) grow(n int) error {
	m.bytes += int64(n)
	if m.bytes > m.maxBytes {
		return m.check()
	}
	return m.spend(n)
}

// tick is called with the value of every loop body and `+`: it counts the
// iteration, and big strings against the memory budget.
func tick(params ...any) (any, error) {
	m, v := params[0].(*meter), params[1]
	if m == nil {
		return v, nil
	}
	if n := valueBytes(v); n >= bigValue {
		return v, m.grow(n)
	}
	return v, m.spend(iterationWork)
}

// valueBytes is about what a value a loop body made holds: strings by
// length, lists by their headers (their elements were counted as they
// were made).
func valueBytes(v any) int {
	switch x := v.(type) {
	case string:
		return len(x)
	case []any:
		return 16 * len(x)
	case []string:
		n := 16 * len(x)
		for _, s := range x {
			n += len(s)
		}
		return n
	}
	return 0
}

// heavyTick is tick for loop bodies of unknown cost: it reads the clock on
// every iteration.
func heavyTick(params ...any) (any, error) {
	m, v := params[0].(*meter), params[1]
	if m == nil {
		return v, nil
	}
	if n := valueBytes(v); n >= bigValue {
		m.bytes += int64(n)
	}
	return v, m.spend(checkWork)
}

// meterPatch threads the meter through a compiled condition: every loop
// body and every `+` goes through a tick, and metered helpers get it as
// their first argument.
type meterPatch struct{ wrapped map[*ast.PredicateNode]bool }

// meteredHelpers take the meter as their first argument.
var meteredHelpers = map[string]bool{
	"text": true, matchesFunc: true, "json": true, "pii": true, "secrets": true, "injection": true, "urls": true,
	"repeat": true, "replace": true, "join": true, "toJSON": true,
}

func meterIdent() ast.Node { return &ast.IdentifierNode{Value: meterName} }

// wrap sends a loop body through the named tick, once.
func (p meterPatch) wrap(pred *ast.PredicateNode, tick string) {
	if p.wrapped[pred] {
		return
	}
	p.wrapped[pred] = true
	body := pred.Node
	call := &ast.CallNode{Callee: &ast.IdentifierNode{Value: tick}, Arguments: []ast.Node{meterIdent(), body}}
	call.SetLocation(body.Location())
	pred.Node = call
}

func predicateNode(b *ast.BuiltinNode) *ast.PredicateNode {
	for _, a := range b.Arguments {
		if p, ok := a.(*ast.PredicateNode); ok {
			return p
		}
	}
	return nil
}

// flatBuiltins cost the same whatever the trace (or are bounded by one
// value's size); any other builtin may cost as much as the whole trace.
var flatBuiltins = map[string]bool{
	"len": true, "abs": true, "int": true, "float": true, "ceil": true, "floor": true, "round": true,
	"type": true, "now": true, "duration": true, "date": true, "timezone": true, "first": true, "last": true, "get": true,
}

// scanningOperators cost as much as the text they read.
var scanningOperators = map[string]bool{"matches": true, "contains": true, "startsWith": true, "endsWith": true, "in": true}

// scansOrBuilds reports whether n calls a builtin that is neither flat nor
// a loop (those have their own ticks) nor metered, or applies an operator
// that scans text.
func scansOrBuilds(n ast.Node) bool {
	found := false
	ast.Walk(&n, visitor(func(x ast.Node) {
		switch y := x.(type) {
		case *ast.BuiltinNode:
			found = found || !flatBuiltins[y.Name] && predicateNode(y) == nil
		case *ast.BinaryNode:
			found = found || scanningOperators[y.Operator]
		}
	}))
	return found
}

func (p meterPatch) Visit(node *ast.Node) {
	switch x := (*node).(type) {
	case *ast.BuiltinNode:
		pred := predicateNode(x)
		if pred == nil {
			return
		}
		// every loop body ticks; one that scans text or calls a builtin
		// of unknown cost reads the clock on every iteration
		if scansOrBuilds(pred.Node) {
			p.wrap(pred, heavyTickName)
		} else {
			p.wrap(pred, tickName)
		}
	case *ast.BinaryNode:
		if x.Operator != "+" {
			return
		}
		loc := x.Location()
		ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: tickName}, Arguments: []ast.Node{meterIdent(), x}})
		(*node).SetLocation(loc)
	case *ast.CallNode:
		id, ok := x.Callee.(*ast.IdentifierNode)
		if !ok || !meteredHelpers[id.Value] || len(x.Arguments) > 0 && isMeter(x.Arguments[0]) {
			return
		}
		x.Arguments = append([]ast.Node{meterIdent()}, x.Arguments...)
	}
}

func isMeter(n ast.Node) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && id.Value == meterName
}

// meterOf takes the meter a patched call passes first (nil in an env
// without one).
func meterOf(params []any) (*meter, []any) {
	if len(params) > 0 {
		if m, ok := params[0].(*meter); ok {
			return m, params[1:]
		}
	}
	return nil, params
}
