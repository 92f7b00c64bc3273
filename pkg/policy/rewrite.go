package policy

import (
	"fmt"
	"strings"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser/lexer"
)

// rewritten is a condition translated to plain expr, with a map back to the
// user's text so error positions point at what they wrote.
type rewritten struct {
	src    string
	origin []int // origin[i] = rune offset in the original for rune i of src
}

// closureHelpers turn troy's cross-step helpers into expr's builtin predicate
// calls, the only calls expr lets a closure be passed to.
var closureHelpers = map[string]string{
	"any_step": "any(steps, ",
	"any_next": "any(next_steps, ",
	"any_prev": "any(prev_steps, ",
}

// matchesFunc is the name the call form matches(text, pattern) is compiled to;
// expr reserves `matches` for its case-sensitive infix operator.
const matchesFunc = "__troy_matches"

// rewrite translates troy's helper call forms on expr's own tokens, so text
// inside string literals is never touched.
func rewrite(cond string) (rewritten, error) {
	toks, err := lexer.Lex(file.NewSource(cond))
	if err != nil {
		return rewritten{}, err
	}
	orig := []rune(cond)
	var out []rune
	var origin []int
	copyTo := func(end int, from *int) {
		for ; *from < end; *from++ {
			out = append(out, orig[*from])
			origin = append(origin, *from)
		}
	}
	insert := func(s string, at int) {
		for _, r := range s {
			out = append(out, r)
			origin = append(origin, at)
		}
	}
	pos := 0
	for i, t := range toks {
		if t.Kind == lexer.Identifier && strings.HasPrefix(t.Value, "__") {
			return rewritten{}, &file.Error{Location: file.Location{From: t.From, To: t.To},
				Message: fmt.Sprintf("%s: names starting with __ are reserved for troy", t.Value)}
		}
		if i+1 >= len(toks) || !toks[i+1].Is(lexer.Bracket, "(") {
			continue
		}
		var repl string
		switch {
		case t.Is(lexer.Operator, "matches") && !endsOperand(toks, i):
			repl = matchesFunc + "("
		case t.Kind == lexer.Identifier && closureHelpers[t.Value] != "" && !(i > 0 && toks[i-1].Is(lexer.Operator, ".", "?.")):
			repl = closureHelpers[t.Value]
		default:
			continue
		}
		copyTo(t.From, &pos)
		insert(repl, t.From)
		pos = toks[i+1].To // skip the name and its "("
	}
	copyTo(len(orig), &pos)
	origin = append(origin, len(orig)) // end of input
	return rewritten{src: string(out), origin: origin}, nil
}

// endsOperand reports whether the token before i closes an operand, in which
// case `matches (` is the infix operator with a parenthesised right side.
func endsOperand(toks []lexer.Token, i int) bool {
	if i == 0 {
		return false
	}
	p := toks[i-1]
	switch p.Kind {
	case lexer.Identifier, lexer.Number, lexer.String, lexer.Bytes:
		return true
	case lexer.Bracket:
		return p.Value == ")" || p.Value == "]" || p.Value == "}"
	}
	return false
}

// originalOffset maps a rune offset in the rewritten source back to the original.
func (r rewritten) originalOffset(off int) int {
	if off < 0 {
		return 0
	}
	if off >= len(r.origin) {
		return r.origin[len(r.origin)-1]
	}
	return r.origin[off]
}
