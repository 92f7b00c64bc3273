package policy

import (
	"github.com/expr-lang/expr/ast"
)

// When a rule's verdict on a step is certain while a trace is still
// arriving step by step.
const (
	// DecideNow: the condition reads only the step and what came before it,
	// so its verdict is final as soon as the step arrives.
	DecideNow = "now"
	// DecideWhenTrue: it also looks ahead, but only through any(…) of later
	// steps outside any negation, so once true it stays true: it fires the
	// moment a later step makes it true.
	DecideWhenTrue = "when-true"
	// DecideAtEnd: its truth can still change until the trace ends (a
	// negated look-ahead, all/count/len over later steps, next_step == nil…).
	DecideAtEnd = "at-end"
)

// futureNames are the scope names that read steps after the current one.
var futureNames = map[string]bool{"next_steps": true, "next_step": true, "steps": true}

// decideWhen classifies a compiled condition.
func decideWhen(root ast.Node) string {
	kind := DecideNow
	var walk func(n ast.Node, positive bool)
	walk = func(n ast.Node, positive bool) {
		switch x := n.(type) {
		case *ast.IdentifierNode:
			if futureNames[x.Value] {
				kind = DecideAtEnd // reached other than as any(…)'s collection in a positive place
			}
		case *ast.BinaryNode:
			if x.Operator == "and" || x.Operator == "&&" || x.Operator == "or" || x.Operator == "||" {
				walk(x.Left, positive)
				walk(x.Right, positive)
				return
			}
			walk(x.Left, false)
			walk(x.Right, false)
		case *ast.UnaryNode:
			walk(x.Node, false)
		case *ast.BuiltinNode:
			if x.Name == "any" && positive && len(x.Arguments) == 2 && readsFutureOnly(x.Arguments[0]) {
				if kind == DecideNow {
					kind = DecideWhenTrue
				}
				walk(x.Arguments[1], false) // the predicate itself must not look further ahead
				return
			}
			for _, a := range x.Arguments {
				walk(a, false)
			}
		default:
			kids, known := children(n)
			if !known && mentionsFuture(n) {
				kind = DecideAtEnd // a node this analysis does not know: be safe
			}
			for _, c := range kids {
				walk(c, false)
			}
		}
	}
	walk(root, true)
	return kind
}

// infoNames are the scope names that read the trace's and agent's
// identity and metadata.
var infoNames = map[string]bool{"trace": true, "agent": true}

func mentionsFuture(n ast.Node) bool { return mentions(n, futureNames) }

// mentions reports whether the condition reads any of the scope names.
func mentions(n ast.Node, names map[string]bool) bool {
	found := false
	ast.Walk(&n, visitor(func(x ast.Node) {
		if id, ok := x.(*ast.IdentifierNode); ok && names[id.Value] {
			found = true
		}
	}))
	return found
}

// readsFutureOnly reports whether a collection argument is next_steps or
// steps itself (any over a growing list only grows).
func readsFutureOnly(n ast.Node) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && (id.Value == "next_steps" || id.Value == "steps")
}

// children lists a node's direct children; known is false for a node type
// it does not handle.
func children(n ast.Node) (kids []ast.Node, known bool) {
	switch x := n.(type) {
	case *ast.MemberNode:
		return []ast.Node{x.Node, x.Property}, true
	case *ast.ChainNode:
		return []ast.Node{x.Node}, true
	case *ast.SliceNode:
		out := []ast.Node{x.Node}
		if x.From != nil {
			out = append(out, x.From)
		}
		if x.To != nil {
			out = append(out, x.To)
		}
		return out, true
	case *ast.CallNode:
		return append([]ast.Node{x.Callee}, x.Arguments...), true
	case *ast.PredicateNode:
		return []ast.Node{x.Node}, true
	case *ast.ConditionalNode:
		return []ast.Node{x.Cond, x.Exp1, x.Exp2}, true
	case *ast.VariableDeclaratorNode:
		return []ast.Node{x.Value, x.Expr}, true
	case *ast.SequenceNode:
		return x.Nodes, true
	case *ast.ArrayNode:
		return x.Nodes, true
	case *ast.MapNode:
		out := make([]ast.Node, len(x.Pairs))
		copy(out, x.Pairs)
		return out, true
	case *ast.PairNode:
		return []ast.Node{x.Key, x.Value}, true
	case *ast.PointerNode, *ast.IdentifierNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.StringNode, *ast.NilNode, *ast.ConstantNode, *ast.BytesNode:
		return nil, true
	}
	return nil, false
}
