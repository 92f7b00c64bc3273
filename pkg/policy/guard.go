package policy

import (
	"github.com/expr-lang/expr/ast"

	"github.com/troy-audit/troy/pkg/trace"
)

// stepGuard lets the engine skip a rule where it cannot fire, without running
// it. It reads the conjuncts a condition starts with, left to right, for as
// long as each is one of the forms below. These forms never fail, and expr
// evaluates `and` left to right, so when any of them is false the condition
// is false: skipping gives exactly what running would (false, never a rule
// error).
//
//	step.type == 'tool_call'                  skip steps of other types
//	step_index == 0                           skip other steps
//	get(step, 'metadata.k'[, d]) == 'v'|true|nil   skip steps where the value differs
//	get(agent|trace, 'metadata.k'[, d]) == / != 'v'   decided once per trace
//	matches(get(step, 'k'[, d]), 'regex')     skip steps where it does not match
//
// Value comparisons follow expr's == for strings, booleans and nil. When
// every conjunct is one of the comparison forms, the guard is the whole
// condition (complete): a step it does not skip fires, without running the
// condition at all. A regex test only skips (matching text is metered work
// in the condition; its rule errors come from there).
type stepGuard struct {
	stepType  string
	stepIndex int // -1: any

	fields  []*fieldTest // on the step
	wholes  []*fieldTest // on the trace or agent, once per trace
	regexes []*regexTest // on the step
	// complete: the conjuncts above are the whole condition.
	complete bool
}

// regexTest is matches(get(step, path, def), pattern).
type regexTest struct {
	path string
	def  any
	m    *Matcher
}

func (r *regexTest) holds(s *trace.Step) bool {
	v, found := Lookup(s, r.path)
	if !found || v == nil {
		v = r.def
	}
	return r.m.MatchValue(v)
}

// fieldTest is get(base, path, def) == want (or != when negate).
type fieldTest struct {
	base   string // step, agent or trace
	path   string
	def    any
	want   any // string or bool
	negate bool
}

func guardOf(node ast.Node) stepGuard {
	g := stepGuard{stepIndex: -1}
	all := conjuncts(node)
	taken := 0
	for _, c := range all {
		if !g.add(c) {
			break
		}
		taken++
	}
	g.complete = taken == len(all) && len(g.regexes) == 0
	return g
}

// conjuncts flattens a chain of `and` into its operands, in evaluation order.
func conjuncts(node ast.Node) []ast.Node {
	if b, ok := node.(*ast.BinaryNode); ok && (b.Operator == "and" || b.Operator == "&&") {
		return append(conjuncts(b.Left), b.Right)
	}
	return []ast.Node{node}
}

// add records one conjunct; false when it is not a guard form.
func (g *stepGuard) add(node ast.Node) bool {
	if rt := regexOf(node); rt != nil {
		g.regexes = append(g.regexes, rt)
		return true
	}
	b, ok := node.(*ast.BinaryNode)
	if !ok || (b.Operator != "==" && b.Operator != "!=") {
		return false
	}
	eq := b.Operator == "=="
	if eq && g.stepType == "" && (stepTypeEquality(b.Left, b.Right, g) || stepTypeEquality(b.Right, b.Left, g)) {
		return true
	}
	if eq && g.stepIndex < 0 && (stepIndexEquality(b.Left, b.Right, g) || stepIndexEquality(b.Right, b.Left, g)) {
		return true
	}
	ft := getEquality(b.Left, b.Right)
	if ft == nil {
		ft = getEquality(b.Right, b.Left)
	}
	if ft == nil {
		return false
	}
	ft.negate = !eq
	switch {
	case ft.base == "step" && eq:
		g.fields = append(g.fields, ft)
	case ft.base == "agent" || ft.base == "trace":
		g.wholes = append(g.wholes, ft)
	default:
		return false
	}
	return true
}

// regexOf matches matches(get(step, 'path'[, constant]), 'pattern') as the
// rewrite leaves it: __troy_matches(__meter, get(…), <compiled pattern>).
func regexOf(node ast.Node) *regexTest {
	c, ok := node.(*ast.CallNode)
	if !ok || len(c.Arguments) != 3 {
		return nil
	}
	if fn, ok := c.Callee.(*ast.IdentifierNode); !ok || fn.Value != matchesFunc {
		return nil
	}
	pat, ok := c.Arguments[2].(*ast.ConstantNode)
	if !ok {
		return nil
	}
	m, ok := pat.Value.(*Matcher)
	if !ok {
		return nil
	}
	get, ok := c.Arguments[1].(*ast.CallNode)
	if !ok || len(get.Arguments) < 2 || len(get.Arguments) > 3 {
		return nil
	}
	if fn, ok := get.Callee.(*ast.IdentifierNode); !ok || fn.Value != "get" {
		return nil
	}
	if base, ok := get.Arguments[0].(*ast.IdentifierNode); !ok || base.Value != "step" {
		return nil
	}
	path, ok := get.Arguments[1].(*ast.StringNode)
	if !ok {
		return nil
	}
	rt := &regexTest{path: path.Value, m: m}
	if len(get.Arguments) == 3 {
		d, ok := constant(get.Arguments[2])
		if !ok {
			return nil
		}
		rt.def = d
	}
	return rt
}

func stepTypeEquality(member, value ast.Node, g *stepGuard) bool {
	m, ok := member.(*ast.MemberNode)
	if !ok || m.Optional {
		return false
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	prop, ok2 := m.Property.(*ast.StringNode)
	val, ok3 := value.(*ast.StringNode)
	if !ok || !ok2 || !ok3 || id.Value != "step" || prop.Value != "type" {
		return false
	}
	g.stepType = val.Value
	return true
}

func stepIndexEquality(ident, value ast.Node, g *stepGuard) bool {
	id, ok := ident.(*ast.IdentifierNode)
	n, ok2 := value.(*ast.IntegerNode)
	if !ok || !ok2 || id.Value != "step_index" {
		return false
	}
	g.stepIndex = n.Value
	return true
}

// getEquality matches get(step|agent|trace, 'path'[, constant]) against a
// string or boolean constant.
func getEquality(call, value ast.Node) *fieldTest {
	c, ok := call.(*ast.CallNode)
	if !ok || len(c.Arguments) < 2 || len(c.Arguments) > 3 {
		return nil
	}
	if fn, ok := c.Callee.(*ast.IdentifierNode); !ok || fn.Value != "get" {
		return nil
	}
	base, ok := c.Arguments[0].(*ast.IdentifierNode)
	if !ok || (base.Value != "step" && base.Value != "agent" && base.Value != "trace") {
		return nil
	}
	path, ok := c.Arguments[1].(*ast.StringNode)
	if !ok {
		return nil
	}
	ft := &fieldTest{base: base.Value, path: path.Value}
	if len(c.Arguments) == 3 {
		d, ok := constant(c.Arguments[2])
		if !ok {
			return nil
		}
		ft.def = d
	}
	want, ok := constant(value)
	if !ok {
		return nil
	}
	if _, isMap := want.(map[string]any); isMap {
		return nil // == {} compares maps; not a guard form
	}
	ft.want = want
	return ft
}

func constant(n ast.Node) (any, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.BoolNode:
		return v.Value, true
	case *ast.NilNode:
		return nil, true
	case *ast.MapNode:
		if len(v.Pairs) == 0 { // {} as get's default
			return map[string]any{}, true
		}
	}
	return nil, false
}

// holds evaluates the test the way the condition would.
func (f *fieldTest) holds(base any) bool {
	v, found := Lookup(base, f.path)
	if !found || v == nil {
		v = f.def
	}
	eq := false
	switch w := f.want.(type) {
	case string:
		s, ok := v.(string)
		eq = ok && s == w
	case bool:
		b, ok := v.(bool)
		eq = ok && b == w
	case nil:
		eq = v == nil
	}
	return eq != f.negate
}

// skipsTrace reports whether the rule cannot fire anywhere in this trace.
func (g stepGuard) skipsTrace(env *Env) bool {
	for _, w := range g.wholes {
		base := env.Agent
		if w.base == "trace" {
			base = env.Trace
		}
		if !w.holds(base) {
			return true
		}
	}
	return false
}

// skips reports whether the rule cannot fire on step i.
func (g stepGuard) skips(i int, s *trace.Step) bool {
	if (g.stepType != "" && g.stepType != s.Type) || (g.stepIndex >= 0 && g.stepIndex != i) {
		return true
	}
	for _, f := range g.fields {
		if !f.holds(s) {
			return true
		}
	}
	for _, r := range g.regexes {
		if !r.holds(s) {
			return true
		}
	}
	return false
}
