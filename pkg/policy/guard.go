package policy

import (
	"github.com/expr-lang/expr/ast"
)

// stepGuard lets the engine skip a rule on steps where it cannot fire
// without running it: a condition whose leftmost conjunct is
// `step.type == 'X'` or `step_index == N` is false on every other step. Only
// the leftmost conjunct counts: expr evaluates it first, so skipping gives
// exactly the result running would (false, never a rule error).
type stepGuard struct {
	stepType  string
	stepIndex int // -1: any
}

func guardOf(node ast.Node) stepGuard {
	g := stepGuard{stepIndex: -1}
	for {
		b, ok := node.(*ast.BinaryNode)
		if !ok {
			break
		}
		if b.Operator == "and" || b.Operator == "&&" {
			node = b.Left
			continue
		}
		if b.Operator != "==" {
			break
		}
		if typ, ok := stepTypeEquality(b.Left, b.Right); ok {
			g.stepType = typ
		} else if typ, ok := stepTypeEquality(b.Right, b.Left); ok {
			g.stepType = typ
		} else if n, ok := stepIndexEquality(b.Left, b.Right); ok {
			g.stepIndex = n
		} else if n, ok := stepIndexEquality(b.Right, b.Left); ok {
			g.stepIndex = n
		}
		break
	}
	return g
}

func stepTypeEquality(member, value ast.Node) (string, bool) {
	m, ok := member.(*ast.MemberNode)
	if !ok || m.Optional {
		return "", false
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	prop, ok2 := m.Property.(*ast.StringNode)
	val, ok3 := value.(*ast.StringNode)
	if !ok || !ok2 || !ok3 || id.Value != "step" || prop.Value != "type" {
		return "", false
	}
	return val.Value, true
}

func stepIndexEquality(ident, value ast.Node) (int, bool) {
	id, ok := ident.(*ast.IdentifierNode)
	n, ok2 := value.(*ast.IntegerNode)
	if !ok || !ok2 || id.Value != "step_index" {
		return 0, false
	}
	return n.Value, true
}

// skips reports whether the rule cannot fire on step i of type typ.
func (g stepGuard) skips(i int, typ string) bool {
	return (g.stepType != "" && g.stepType != typ) || (g.stepIndex >= 0 && g.stepIndex != i)
}
