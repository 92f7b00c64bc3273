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
	// maxNesting bounds predicates inside predicates over any collection.
	maxNesting = 3
	// maxRange bounds a constant range (1..n) a condition may iterate.
	maxRange = 100_000
)

// DefaultBudget is how long one rule may spend on one trace before it is
// stopped with a rule error. Rules that only compare fields of the step
// cost the same on every step and are not timed.
const DefaultBudget = 2 * time.Second

// How much a rule's run may cost, and so how it is timed.
type cost uint8

const (
	costFlat    cost = iota // compares fields of the step: never timed
	costHelpers             // scans or builds text: timed when a run did real work
	costLoops               // iterates: every run is timed
)

// safetyCheck reads a compiled condition: it refuses nesting and ranges beyond
// the bounds, and says what the rule may cost.
func safetyCheck(root ast.Node) (c cost, err error) {
	var preds []*ast.BuiltinNode
	var rangeErr error
	aliases := stepAliases(root)
	ast.Walk(&root, visitor(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.CallNode:
			if id, ok := x.Callee.(*ast.IdentifierNode); ok {
				switch {
				case id.Value == tickName || id.Value == heavyTickName:
					c = costLoops
				case meteredHelpers[id.Value]:
					c = max(c, costHelpers)
				}
			}
			// Only troy's helpers and expr's builtins are callable, never
			// methods of the Go values behind steps and traces.
			if _, method := x.Callee.(*ast.MemberNode); method && rangeErr == nil {
				rangeErr = fmt.Errorf("method calls are not part of the policy language: use get(), text() and the helpers")
			}
		case *ast.BuiltinNode:
			if predicateOf(x) != nil {
				preds = append(preds, x)
			} else if !flatBuiltins[x.Name] {
				c = costLoops // toJSON(steps), sort(…): as costly as a loop, and timed
			}
		case *ast.BinaryNode:
			if scanningOperators[x.Operator] {
				c = costLoops // steps[0].output matches …: as costly as the text, timed
			}
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
		return costFlat, rangeErr
	}
	for _, p := range preds {
		if d := nesting(p); d > maxNesting {
			return costFlat, fmt.Errorf("predicates nested %d deep (at most %d): flatten the condition", d, maxNesting)
		}
		if stepsInside(p, aliases) {
			return costFlat, fmt.Errorf("a predicate over the steps inside another loop (e.g. any_next inside any_step, or any_step inside any(1..n, …)) costs the trace's length times the loop's on every step; test the steps in one pass, or use prev_step/next_step")
		}
	}
	if len(preds) > 0 {
		c = costLoops
	}
	return c, nil
}

// nesting is how deep predicates nest from p down (1 for p alone).
func nesting(p *ast.BuiltinNode) int {
	body := predicateOf(p)
	deepest := 0
	ast.Walk(&body, visitor(func(n ast.Node) {
		if b, ok := n.(*ast.BuiltinNode); ok && b != p && predicateOf(b) != nil {
			deepest = max(deepest, nesting(b))
		}
	}))
	return 1 + deepest
}

// stepsInside reports whether a predicate over the steps runs inside p's
// loop body.
func stepsInside(p *ast.BuiltinNode, aliases map[string]bool) bool {
	body := predicateOf(p)
	found := false
	ast.Walk(&body, visitor(func(n ast.Node) {
		if b, ok := n.(*ast.BuiltinNode); ok && b != p && predicateOf(b) != nil && overSteps(b, aliases) {
			found = true
		}
	}))
	return found
}

// stepAliases finds the variables (let x = …) that hold the steps or part of
// them, so `let s = steps; all(s, {all(s, …)})` is seen for what it is.
func stepAliases(root ast.Node) map[string]bool {
	aliases := map[string]bool{}
	for changed := true; changed; { // an alias of an alias
		changed = false
		ast.Walk(&root, visitor(func(n ast.Node) {
			if v, ok := n.(*ast.VariableDeclaratorNode); ok && !aliases[v.Name] && mentionsSteps(v.Value, aliases) {
				aliases[v.Name] = true
				changed = true
			}
		}))
	}
	return aliases
}

// predicateOf returns the closure a builtin (any, all, filter, count, …) runs
// per element, or nil.
func predicateOf(b *ast.BuiltinNode) ast.Node {
	if p := predicateNode(b); p != nil {
		return p.Node
	}
	return nil
}

// overSteps reports whether a builtin iterates the trace's steps.
func overSteps(b *ast.BuiltinNode, aliases map[string]bool) bool {
	return len(b.Arguments) > 0 && mentionsSteps(b.Arguments[0], aliases)
}

// mentionsSteps reports whether an expression reads the trace's step lists
// (directly or through an alias).
func mentionsSteps(n ast.Node, aliases map[string]bool) bool {
	found := false
	ast.Walk(&n, visitor(func(x ast.Node) {
		if id, ok := x.(*ast.IdentifierNode); ok {
			switch id.Value {
			case "steps", "prev_steps", "next_steps":
				found = true
			default:
				found = found || aliases[id.Value]
			}
		}
	}))
	return found
}

type visitor func(ast.Node)

func (v visitor) Visit(n *ast.Node) { v(*n) }
