package policy

import (
	"fmt"
	"time"

	"github.com/expr-lang/expr/ast"
)

// Bounds on what one condition may cost. expr itself refuses conditions of
// more than 10,000 nodes and stops a run that allocates too much (a huge
// range); these add what it does not bound: loops over data that already
// exists. Go's regexp runs in linear time, so patterns cannot blow up.
const (
	// maxStepNesting: a predicate over the steps inside another one costs
	// the cube of the trace length per trace; one level (any_next on every
	// step) is the square, which the time budget then bounds.
	maxStepNesting = 1
	// maxNesting bounds predicates inside predicates over any collection.
	maxNesting = 3
	// maxRange bounds a constant range (1..n) a condition may iterate.
	maxRange = 100_000
)

// DefaultBudget is how long one rule may spend on one trace before it is
// stopped with a rule error. Only rules with loops are timed.
const DefaultBudget = 2 * time.Second

// safetyCheck reads a compiled condition: it refuses nesting and ranges beyond
// the bounds, and says whether the rule loops (and so is timed).
func safetyCheck(root ast.Node) (loops bool, err error) {
	var preds []*ast.BuiltinNode
	var rangeErr error
	ast.Walk(&root, visitor(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.CallNode:
			// Only troy's helpers and expr's builtins are callable, never
			// methods of the Go values behind steps and traces.
			if _, method := x.Callee.(*ast.MemberNode); method && rangeErr == nil {
				rangeErr = fmt.Errorf("method calls are not part of the policy language: use get(), text() and the helpers")
			}
		case *ast.BuiltinNode:
			if predicateOf(x) != nil {
				preds = append(preds, x)
			}
		case *ast.BinaryNode:
			if x.Operator == ".." {
				lo, ok1 := x.Left.(*ast.IntegerNode)
				hi, ok2 := x.Right.(*ast.IntegerNode)
				if ok1 && ok2 && hi.Value-lo.Value > maxRange && rangeErr == nil {
					rangeErr = fmt.Errorf("the range %d..%d has %d elements, over the %d a condition may iterate", lo.Value, hi.Value, hi.Value-lo.Value+1, maxRange)
				}
			}
		}
	}))
	if rangeErr != nil {
		return false, rangeErr
	}
	for _, p := range preds {
		if d := nesting(p, false); d > maxNesting {
			return false, fmt.Errorf("predicates nested %d deep (at most %d): flatten the condition", d, maxNesting)
		}
		if d := nesting(p, true); d > maxStepNesting {
			return false, fmt.Errorf("a predicate over the steps inside another one (e.g. any_next inside any_step) costs the cube of the trace length; test the steps in one pass, or use prev_step/next_step")
		}
	}
	return len(preds) > 0, nil
}

// nesting is how deep predicates nest from p down (1 for p alone); with
// stepsOnly, only predicates over the trace's steps count.
func nesting(p *ast.BuiltinNode, stepsOnly bool) int {
	self := 0
	if !stepsOnly || overSteps(p) {
		self = 1
	}
	body := predicateOf(p)
	deepest := 0
	ast.Walk(&body, visitor(func(n ast.Node) {
		if b, ok := n.(*ast.BuiltinNode); ok && b != p && predicateOf(b) != nil {
			deepest = max(deepest, nesting(b, stepsOnly))
		}
	}))
	return self + deepest
}

// predicateOf returns the closure a builtin (any, all, filter, count, …) runs
// per element, or nil.
func predicateOf(b *ast.BuiltinNode) ast.Node {
	for _, a := range b.Arguments {
		if p, ok := a.(*ast.PredicateNode); ok {
			return p.Node
		}
	}
	return nil
}

// overSteps reports whether a builtin iterates the trace's steps.
func overSteps(b *ast.BuiltinNode) bool {
	if len(b.Arguments) == 0 {
		return false
	}
	found := false
	coll := b.Arguments[0]
	ast.Walk(&coll, visitor(func(n ast.Node) {
		if id, ok := n.(*ast.IdentifierNode); ok {
			switch id.Value {
			case "steps", "prev_steps", "next_steps":
				found = true
			}
		}
	}))
	return found
}

type visitor func(ast.Node)

func (v visitor) Visit(n *ast.Node) { v(*n) }
