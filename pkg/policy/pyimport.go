package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// FromPython translates a condition written in the Python subset of troy's predecessor
// into troy's expr language:
//
//	get(…), matches(…), any_step/any_next/any_prev(lambda s: …), s['k'],
//	x.get('k', d), and/or/not, ==, !=, in, is None, is not None,
//	is True/False, True/False/None, str(), len(), json.dumps(x)
//
// Anything else is an error naming what is not supported, never a guess.
func FromPython(cond string) (string, error) {
	toks, err := pyLex(cond)
	if err != nil {
		return "", err
	}
	tr := &pyTranslator{toks: toks}
	out, err := tr.until("")
	if err != nil {
		return "", err
	}
	return render(out), nil
}

// render joins translated tokens with spaces where a person would put them.
func render(toks []string) string {
	var b strings.Builder
	prev := ""
	for _, tok := range toks {
		noSpace := prev == "" || strings.HasSuffix(prev, "(") || strings.HasSuffix(prev, "[") || strings.HasSuffix(prev, "{") ||
			prev == "." ||
			tok == ")" || tok == "]" || tok == "})" || tok == "," || tok == "." ||
			((tok == "(" || tok == "[") && (isName(prev) || prev == ")" || prev == "]"))
		if !noSpace {
			b.WriteByte(' ')
		}
		b.WriteString(tok)
		prev = tok
	}
	return b.String()
}

func isName(s string) bool {
	if s == "" || s == "and" || s == "or" || s == "not" || s == "in" {
		return false
	}
	for _, c := range s {
		if !(unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' || c == '#') {
			return false
		}
	}
	return true
}

type pyTok struct {
	kind string // name, num, str, op
	text string
	pos  int
}

func pyLex(s string) ([]pyTok, error) {
	var toks []pyTok
	r := []rune(s)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#':
			return nil, fmt.Errorf("column %d: comments are not supported in a condition", i+1)
		case unicode.IsLetter(c) || c == '_':
			j := i
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_') {
				j++
			}
			word := string(r[i:j])
			if j < len(r) && (r[j] == '\'' || r[j] == '"') && strings.ContainsAny(strings.ToLower(word), "rbuf") && len(word) <= 2 {
				if strings.ContainsAny(strings.ToLower(word), "bf") {
					return nil, fmt.Errorf("column %d: %s-strings are not supported", i+1, word)
				}
				str, n, err := pyString(r[j:], strings.ContainsRune(strings.ToLower(word), 'r'))
				if err != nil {
					return nil, fmt.Errorf("column %d: %w", i+1, err)
				}
				toks = append(toks, pyTok{"str", str, i})
				i = j + n
				continue
			}
			toks = append(toks, pyTok{"name", word, i})
			i = j
		case unicode.IsDigit(c):
			j := i
			for j < len(r) && (unicode.IsDigit(r[j]) || r[j] == '.' || r[j] == '_') {
				j++
			}
			toks = append(toks, pyTok{"num", strings.ReplaceAll(string(r[i:j]), "_", ""), i})
			i = j
		case c == '\'' || c == '"':
			str, n, err := pyString(r[i:], false)
			if err != nil {
				return nil, fmt.Errorf("column %d: %w", i+1, err)
			}
			toks = append(toks, pyTok{"str", str, i})
			i += n
		default:
			two := ""
			if i+1 < len(r) {
				two = string(r[i : i+2])
			}
			switch two {
			case "==", "!=", "<=", ">=", "**", "//":
				toks = append(toks, pyTok{"op", two, i})
				i += 2
				continue
			}
			if strings.ContainsRune("()[]{},:.<>+-*/%", c) {
				toks = append(toks, pyTok{"op", string(c), i})
				i++
				continue
			}
			return nil, fmt.Errorf("column %d: %q is not supported", i+1, string(c))
		}
	}
	return toks, nil
}

// pyString reads a quoted string (value unescaped) and how many runes it took.
func pyString(r []rune, raw bool) (string, int, error) {
	q := r[0]
	if len(r) >= 3 && r[1] == q && r[2] == q {
		return "", 0, fmt.Errorf("triple-quoted strings are not supported")
	}
	var b strings.Builder
	for i := 1; i < len(r); i++ {
		switch {
		case r[i] == q:
			return b.String(), i + 1, nil
		case r[i] == '\\' && i+1 < len(r):
			if raw {
				b.WriteRune(r[i])
				b.WriteRune(r[i+1])
				i++
				continue
			}
			i++
			switch r[i] {
			case 'n':
				b.WriteRune('\n')
			case 't':
				b.WriteRune('\t')
			case '\\', '\'', '"':
				b.WriteRune(r[i])
			case 'b', 'a', 'f', 'v':
				return "", 0, fmt.Errorf("'\\%c' is a control character in a Python string, not a regular-expression escape: write r'…' (a raw string) for \\%c", r[i], r[i])
			default:
				b.WriteRune('\\')
				b.WriteRune(r[i])
			}
		default:
			b.WriteRune(r[i])
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}

type pyTranslator struct {
	toks   []pyTok
	i      int
	lambda string // the current lambda's parameter, rendered as #
}

// until translates tokens until a closing bracket or the end. Brackets
// opened on the way are consumed whole by one (group).
func (t *pyTranslator) until(closer string) ([]string, error) {
	out, err := t.expr(stopNone)
	if err != nil {
		return nil, err
	}
	if t.i < len(t.toks) {
		if closer == "" {
			tok := t.toks[t.i]
			return nil, fmt.Errorf("column %d: unbalanced %q", tok.pos+1, tok.text)
		}
		return out, nil
	}
	if closer != "" {
		return nil, fmt.Errorf("missing %q", closer)
	}
	return out, nil
}

// Where an operand ends: Python's `not` takes everything up to the next
// and/or; the right side of `in` up to the next comparison too.
const (
	stopNone = iota
	stopBool
	stopCompare
)

// enclosed says whether toks are one bracketed run opened by open: "(",
// then whatever, then the ")" that closes it, last.
func enclosed(toks []string, open string) bool {
	if len(toks) < 2 || toks[0] != open {
		return false
	}
	depth := 0
	for i, tok := range toks {
		switch {
		case strings.HasSuffix(tok, "(") || strings.HasSuffix(tok, "[") || strings.HasSuffix(tok, "{"):
			depth++
		case tok == ")" || tok == "]" || tok == "}" || tok == "})":
			depth--
			if depth == 0 && i < len(toks)-1 {
				return false
			}
		}
	}
	return depth == 0
}

func isCloser(tok pyTok) bool {
	return tok.kind == "op" && (tok.text == ")" || tok.text == "]" || tok.text == "}")
}

func isComparison(tok pyTok) bool {
	switch {
	case tok.kind == "op":
		switch tok.text {
		case "==", "!=", "<", ">", "<=", ">=":
			return true
		}
	case tok.kind == "name":
		return tok.text == "in" || tok.text == "is"
	}
	return false
}

// expr translates up to a closing bracket, the end, or what stop says.
// Python's precedence differs from expr's in two places, handled here:
// `not` binds looser than comparisons (not a == b is not (a == b)), and
// `a in b` is a substring test on strings (py_in(b, a)).
func (t *pyTranslator) expr(stop int) ([]string, error) {
	var out []string
	start := 0 // where the current comparison's operand starts in out
	for t.i < len(t.toks) {
		tok := t.toks[t.i]
		notIn := tok.kind == "name" && tok.text == "not" && len(out) > start && t.peek(1).text == "in"
		switch {
		case isCloser(tok):
			return out, nil
		case tok.kind == "name" && (tok.text == "and" || tok.text == "or"):
			if stop != stopNone {
				return out, nil
			}
			t.i++
			out = append(out, tok.text)
			start = len(out)
		case stop == stopCompare && (isComparison(tok) || notIn):
			return out, nil
		case tok.kind == "op" && tok.text == ",":
			if stop != stopNone {
				return out, nil
			}
			t.i++
			out = append(out, ",")
			start = len(out)
		case tok.kind == "name" && tok.text == "in" || notIn:
			left := slices.Clone(out[start:])
			if len(left) == 0 {
				return nil, fmt.Errorf("column %d: `in` needs a value on its left", tok.pos+1)
			}
			t.i++
			if notIn {
				t.i++
			}
			right, err := t.expr(stopCompare)
			if err != nil {
				return nil, err
			}
			if len(right) == 0 {
				return nil, fmt.Errorf("column %d: `in` needs a value on its right", tok.pos+1)
			}
			out = out[:start]
			switch {
			case enclosed(right, "["): // a list literal: expr's own `in` means the same
				op := []string{"in"}
				if notIn {
					op = []string{"not", "in"}
				}
				out = append(append(append(out, left...), op...), right...)
			default:
				if notIn {
					out = append(out, "not")
				}
				out = append(append(append(append(out, "py_in("), right...), ","), left...)
				out = append(out, ")")
			}
		case tok.kind == "name" && tok.text == "not":
			t.i++
			operand, err := t.expr(stopBool)
			if err != nil {
				return nil, err
			}
			if len(operand) == 0 {
				return nil, fmt.Errorf("column %d: `not` needs a value", tok.pos+1)
			}
			if enclosed(operand, "(") {
				out = append(append(out, "not"), operand...)
			} else {
				out = append(append(append(out, "not", "("), operand...), ")")
			}
		case isComparison(tok) && tok.text != "in":
			s, err := t.one() // == … or is [not] None/True/False
			if err != nil {
				return nil, err
			}
			out = append(out, s[0])
			start = len(out)
			out = append(out, s[1:]...)
		default:
			s, err := t.one()
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
	}
	return out, nil
}

func (t *pyTranslator) peek(k int) pyTok {
	if t.i+k < len(t.toks) {
		return t.toks[t.i+k]
	}
	return pyTok{}
}

// one translates the construct starting at the current token.
func (t *pyTranslator) one() ([]string, error) {
	tok := t.toks[t.i]
	switch tok.kind {
	case "str":
		t.i++
		return []string{exprString(tok.text)}, nil
	case "num":
		t.i++
		return []string{tok.text}, nil
	case "op":
		switch tok.text {
		case "**", "//":
			return nil, fmt.Errorf("column %d: operator %s is not supported", tok.pos+1, tok.text)
		case ":":
			return nil, fmt.Errorf("column %d: slices and dict literals are not supported", tok.pos+1)
		case ".":
			return nil, fmt.Errorf("column %d: attribute access is supported only as x.get('key', default)", tok.pos+1)
		case "(", "[", "{":
			g, err := t.group(tok.text, map[string]string{"(": ")", "[": "]", "{": "}"}[tok.text])
			if err != nil {
				return nil, err
			}
			return t.postfix(g)
		}
		t.i++
		return []string{tok.text}, nil
	}
	// names
	next := t.peek(1)
	switch tok.text {
	case "True", "False":
		t.i++
		return []string{strings.ToLower(tok.text)}, nil
	case "None":
		t.i++
		return []string{"nil"}, nil
	case "and", "or", "not", "in":
		return nil, fmt.Errorf("column %d: %q needs a value before it", tok.pos+1, tok.text)
	case "is":
		return t.isTest()
	case "lambda":
		return nil, fmt.Errorf("column %d: lambda is supported only as the argument of any_step, any_next or any_prev", tok.pos+1)
	case "str":
		if next.text == "(" {
			t.i++
			return []string{"py_str"}, nil // None → 'None', True → 'True', as Python
		}
	case "json":
		if next.text == "." && t.peek(2).text == "dumps" && t.peek(3).text == "(" {
			t.i += 3
			return []string{"text"}, nil
		}
		return nil, fmt.Errorf("column %d: only json.dumps(x) is supported from json", tok.pos+1)
	case "any_step", "any_next", "any_prev":
		return t.predicate()
	case "get", "matches", "len", "step", "steps", "step_index", "prev_steps", "next_steps", "trace", "agent":
	default:
		if tok.text != t.lambda {
			return nil, fmt.Errorf("column %d: %q is not part of the supported subset", tok.pos+1, tok.text)
		}
	}
	// a value: maybe a call, then any chain of x['k'] and x.get(…)
	name := tok.text
	if name == t.lambda {
		name = "#"
	}
	t.i++
	val := []string{name}
	if next.text == "(" {
		call, err := t.group("(", ")")
		if err != nil {
			return nil, err
		}
		val = append(val, call...)
	}
	return t.postfix(val)
}

// group translates a bracketed run starting at the current token (open) up
// to its closer, both included.
func (t *pyTranslator) group(open, closer string) ([]string, error) {
	t.i++ // open
	inner, err := t.until(closer)
	if err != nil {
		return nil, err
	}
	if got := t.peek(0).text; got != closer {
		return nil, fmt.Errorf("column %d: %q where %q closes %q", t.peek(0).pos+1, got, closer, open)
	}
	t.i++ // closer
	return append(append([]string{open}, inner...), closer), nil
}

// postfix translates what follows a value: x['k'] stays, x.get('k', d)
// becomes get(x, 'k', d), chained as often as written.
func (t *pyTranslator) postfix(val []string) ([]string, error) {
	for {
		switch {
		case t.peek(0).text == "[" && t.peek(0).kind == "op":
			idx, err := t.group("[", "]")
			if err != nil {
				return nil, err
			}
			val = append(val, idx...)
		case t.peek(0).text == "." && t.peek(0).kind == "op" && t.peek(1).text == "get" && t.peek(2).text == "(":
			if k := t.peek(3); k.kind == "str" && strings.Contains(k.text, ".") {
				return nil, fmt.Errorf("column %d: .get(%q) reads a key with a dot, which troy's get reads as a path: write x[%s] instead",
					k.pos+1, k.text, exprString(k.text))
			}
			t.i += 2
			args, err := t.group("(", ")")
			if err != nil {
				return nil, err
			}
			// args is ( … ): splice the value in as get's first argument
			val = append(append(append([]string{"get("}, val...), ","), args[1:]...)
		case t.peek(0).text == "." && t.peek(0).kind == "op":
			v := render(val)
			return nil, fmt.Errorf("column %d: attribute access %s.%s is not supported (use get(%s, 'key') or %s['key'])",
				t.peek(1).pos+1, v, t.peek(1).text, v, v)
		default:
			return val, nil
		}
	}
}

// isTest translates is None / is not None / is True / is False.
func (t *pyTranslator) isTest() ([]string, error) {
	pos := t.toks[t.i].pos
	t.i++
	op := "=="
	if t.peek(0).text == "not" {
		op = "!="
		t.i++
	}
	switch v := t.peek(0).text; v {
	case "None", "True", "False":
		t.i++
		lit := map[string]string{"None": "nil", "True": "true", "False": "false"}[v]
		return []string{op, lit}, nil
	}
	return nil, fmt.Errorf("column %d: `is` is supported only with None, True or False", pos+1)
}

// predicate translates any_*(lambda s: body) to any_*({ body }) with s as #.
func (t *pyTranslator) predicate() ([]string, error) {
	fn := t.toks[t.i]
	if t.peek(1).text != "(" || t.peek(2).text != "lambda" || t.peek(3).kind != "name" || t.peek(4).text != ":" {
		return nil, fmt.Errorf("column %d: %s takes a lambda, e.g. %s(lambda s: s['type'] == 'tool_call')", fn.pos+1, fn.text, fn.text)
	}
	if t.lambda != "" {
		return nil, fmt.Errorf("column %d: a lambda inside a lambda is not supported", fn.pos+1)
	}
	t.lambda = t.peek(3).text
	t.i += 5
	body, err := t.until(")")
	t.lambda = ""
	if err != nil {
		return nil, err
	}
	t.i++ // )
	return append(append([]string{fn.text + "({"}, body...), "})"), nil
}

// exprString quotes a string for expr: single quotes, or backquotes when it
// holds a backslash (a regular expression), which expr keeps as written.
func exprString(s string) string {
	if strings.Contains(s, `\`) && !strings.ContainsAny(s, "`\n") {
		return "`" + s + "`"
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}

// ImportPython reads a policy of troy's predecessor (JSON or YAML) whose conditions are
// Python expressions and translates each one. Every rule that cannot be
// translated, or whose translation does not compile, is a problem; the
// returned policy holds the rules that translated.
func ImportPython(data []byte) (*Policy, []Problem) {
	p, err := Parse(data)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return nil, pe.Problems
		}
		return nil, []Problem{{Message: err.Error()}}
	}
	var probs []Problem
	out := &Policy{PolicyID: p.PolicyID, Description: p.Description, OnError: p.OnError}
	for _, r := range p.Rules {
		cond, err := FromPython(r.Condition)
		if err != nil {
			probs = append(probs, Problem{RuleID: r.RuleID, Field: "condition", Message: err.Error() + " (in: " + r.Condition + ")"})
			continue
		}
		orig := r.Condition
		r.Condition = cond
		// the translation must pass everything lint checks, not only compile
		if _, err := Compile(&Policy{PolicyID: p.PolicyID, Rules: []Rule{r}}); err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				return nil, []Problem{{RuleID: r.RuleID, Message: err.Error()}}
			}
			for _, pr := range pe.Problems {
				pr.Message += " (translated to: " + r.Condition + "; from: " + orig + ")"
				probs = append(probs, pr)
			}
			continue
		}
		out.Rules = append(out.Rules, r)
	}
	return out, probs
}
