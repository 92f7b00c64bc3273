package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// Loaded is a compiled policy and what was done to read it.
type Loaded struct {
	*Engine
	// Translated lists the rules whose conditions were the original
	// tool's Python and were translated into expr on the way in.
	Translated []string
}

// LoadEngine reads, checks and compiles a policy file: ParseEngine on its
// content, with problems naming the file.
func LoadEngine(path string, o Options) (*Loaded, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	l, err := ParseEngine(data, o)
	var pe *Error
	if errors.As(err, &pe) {
		pe.Source = filepath.Base(path)
	}
	return l, err
}

// ParseEngine reads and compiles a policy, reporting every problem at
// once: the document's shape, each field, and every condition, each with
// the line it is on. A condition that is not expr but is the original
// tool's Python (any_next(lambda s: …), x.get('k'), is None) is translated
// and the rule listed in Translated; one that is neither is a problem.
func ParseEngine(data []byte, o Options) (*Loaded, error) {
	p, probs := parse(data)
	if p == nil {
		return nil, &Error{Problems: probs}
	}
	var translated []string
	// The predecessor's policies are JSON. One whose conditions show its
	// Python is read as Python throughout: a condition valid in both
	// languages can mean different things ('rm' in cmd is a substring
	// test in Python, an error in expr), and Python's meaning is meant.
	isJSON := bytes.HasPrefix(bytes.TrimSpace(data), []byte("{"))
	pyFile := isJSON && slices.ContainsFunc(p.Rules, func(r Rule) bool { return looksPython(r.Condition) })
	if pyFile {
		for i, r := range p.Rules {
			// not Python (expr closures, …) or the same either way: as it is
			if py, err := asPython(p.PolicyID, r, o); err == nil && py != r.Condition {
				p.Rules[i].Condition = py
				translated = append(translated, r.RuleID)
			}
		}
	}
	e, err := CompileWith(p, o)
	var pe *Error
	if errors.As(err, &pe) {
		for _, pr := range pe.Problems {
			i := pr.rule - 1
			if i < 0 || i >= len(p.Rules) || strings.TrimSpace(p.Rules[i].Condition) == "" {
				continue
			}
			r := p.Rules[i]
			// in a JSON file (the predecessor's format) any condition that
			// is not expr may be its Python; in YAML, only one that shows it
			if !isJSON && !looksPython(r.Condition) {
				probs = append(probs, pr)
				continue
			}
			py, perr := asPython(p.PolicyID, r, o)
			switch {
			case perr == nil:
				p.Rules[i].Condition = py
				translated = append(translated, r.RuleID)
				continue
			case py != "":
				pr.Message += "\n   (read as the original tool's Python it translates to " + py + ", which fails: " + perr.Error() + ")"
			case pyFile || looksPython(r.Condition):
				pr.Message += "\n   (read as the original tool's Python it does not translate either: " + perr.Error() + ")"
			}
			probs = append(probs, pr)
		}
		if len(probs) == 0 {
			e, err = CompileWith(p, o)
		}
	} else if err != nil {
		return nil, err
	}
	if len(probs) > 0 {
		sortProblems(probs)
		return nil, &Error{Problems: probs}
	}
	if err != nil {
		return nil, err
	}
	return &Loaded{Engine: e, Translated: translated}, nil
}

// asPython is r's condition read as the predecessor's Python: the
// translation when it compiles on its own; else the translation ("" when
// there is none) and why it cannot be used.
func asPython(policyID string, r Rule, o Options) (string, error) {
	py, err := FromPython(r.Condition)
	if err != nil {
		return "", err
	}
	r.Condition = py
	if _, err := CompileWith(&Policy{PolicyID: policyID, Rules: []Rule{r}}, o); err != nil {
		var pe *Error
		if errors.As(err, &pe) && len(pe.Problems) > 0 {
			return py, errors.New(pe.Problems[0].Message)
		}
		return py, err
	}
	return py, nil
}

// looksPython spots the constructs only the original tool's conditions
// use, in its tokens (not inside string literals): lambda, None, True,
// False, is, x.get(…), json.dumps, r'…'.
func looksPython(cond string) bool {
	toks, err := pyLex(cond)
	if err != nil {
		return false
	}
	runes := []rune(cond)
	for i, tok := range toks {
		if tok.kind == "str" && tok.pos < len(runes) && unicode.IsLetter(runes[tok.pos]) {
			return true // r'…', a raw string
		}
		if tok.kind != "name" {
			continue
		}
		switch tok.text {
		case "lambda", "None", "True", "False", "is":
			return true
		case "get", "dumps":
			if i > 0 && toks[i-1].text == "." {
				return true
			}
		}
	}
	return false
}
