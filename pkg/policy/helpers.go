package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/troy-audit/troy/pkg/detect"
	"github.com/troy-audit/troy/pkg/trace"
)

// Lookup walks a dotted path ("metadata.data_classification", "input.args.0")
// through steps, maps and lists; ok is false when any part is missing.
func Lookup(v any, path string) (any, bool) {
	cur := v
	for path != "" {
		key := path
		if i := strings.IndexByte(path, '.'); i >= 0 {
			key, path = path[:i], path[i+1:]
		} else {
			path = ""
		}
		switch c := cur.(type) {
		case *trace.Step:
			if c == nil {
				return nil, false
			}
			val, ok := c.Field(key)
			if !ok {
				return nil, false
			}
			cur = val
		case map[string]any:
			val, ok := c[key]
			if !ok {
				return nil, false
			}
			cur = val
		case []any:
			n, err := strconv.Atoi(key)
			if err != nil || n < 0 || n >= len(c) {
				return nil, false
			}
			cur = c[n]
		case []*trace.Step:
			n, err := strconv.Atoi(key)
			if err != nil || n < 0 || n >= len(c) {
				return nil, false
			}
			cur = c[n]
		default:
			return nil, false
		}
	}
	return cur, true
}

// get(d, path[, default]): safe nested access. A missing or null value gives
// the default (nil when none is given).
func get(params ...any) (any, error) {
	if len(params) < 2 || len(params) > 3 {
		return nil, fmt.Errorf("get takes 2 or 3 arguments (value, 'a.b.c', default), got %d", len(params))
	}
	path, ok := params[1].(string)
	if !ok {
		return nil, fmt.Errorf("get: the path must be a string such as 'metadata.tool', not %T", params[1])
	}
	var def any
	if len(params) == 3 {
		def = params[2]
	}
	v, found := Lookup(params[0], path)
	if !found || v == nil {
		return def, nil
	}
	return v, nil
}

// matches(text, pattern): case-insensitive regular-expression search. Text
// that is not a string is searched as its JSON. A constant pattern arrives
// precompiled (see patternCompiler).
func matches(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 2 {
		return nil, fmt.Errorf("matches takes 2 arguments (text, pattern), got %d", len(params))
	}
	var pm *Matcher
	switch p := params[1].(type) {
	case *Matcher:
		pm = p
	case string:
		var err error
		if pm, err = cachedMatcher(p); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("matches: the pattern must be a string, not %T", params[1])
	}
	if m != nil {
		if s, ok := params[0].(string); ok {
			if err := m.spend(len(s)); err != nil {
				return nil, err
			}
			return pm.Match(s), nil
		}
		if pm.ruledOut(params[0]) {
			return false, nil
		}
		t, err := m.text(params[0])
		if err != nil {
			return nil, err
		}
		if err := m.spend(len(t)); err != nil {
			return nil, err
		}
		return pm.Match(t), nil
	}
	return pm.MatchValue(params[0]), nil
}

// text(x): any value as searchable text (JSON for maps and lists).
func text(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 1 {
		return nil, fmt.Errorf("text takes 1 argument, got %d", len(params))
	}
	if m == nil {
		return Text(params[0]), nil
	}
	return m.text(params[0])
}

// text renders v as Text does, counting what it builds; the text of a list
// of steps is remembered for the rest of the trace, so text(steps) on every
// step costs one rendering, not one per step.
func (m *meter) text(v any) (string, error) {
	if err := m.spend(iterationWork); err != nil {
		return "", err
	}
	switch v.(type) {
	case []any, map[string]any: // may repeat the whole trace many times over
		if _, over := sizeOf(v, maxBuild); over {
			return "", &BudgetError{Kind: "memory", Detail: fmt.Sprintf("text would build more than the %d MiB one value may have", maxBuild>>20)}
		}
	}
	steps, isSteps := v.([]*trace.Step)
	var key textKey
	if isSteps && len(steps) > 0 {
		key = textKey{first: steps[0], n: len(steps)}
		if s, ok := m.memo[key]; ok {
			return s, nil
		}
	}
	s := Text(v)
	if err := m.grow(len(s)); err != nil {
		return "", err
	}
	if isSteps && len(steps) > 0 && m.memoBytes+len(s) <= memoMaxTextBytes {
		if m.memo == nil {
			m.memo = map[textKey]string{}
		}
		m.memo[key] = s
		m.memoBytes += len(s)
	}
	return s, nil
}

// maxBuild bounds one string a helper builds, whatever the memory budget.
const maxBuild = 64 << 20

// sizeOf estimates the JSON size of v, stopping (over) once it passes
// limit, without building anything.
func sizeOf(v any, limit int) (n int, over bool) {
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if n > limit || depth > maxTextDepth {
			return
		}
		switch x := v.(type) {
		case nil, bool:
			n += 5
		case string:
			n += len(x) + 2
		case float64, int, int64:
			n += 8
		case []any:
			n += 2 + len(x)
			for _, e := range x {
				walk(e, depth+1)
			}
		case map[string]any:
			n += 2
			for k, e := range x {
				n += len(k) + 4
				walk(e, depth+1)
			}
		case []*trace.Step:
			n += 2 + len(x)
			for _, s := range x {
				walk(s, depth+1)
			}
		case *trace.Step:
			if x == nil {
				n += 4
				return
			}
			n += 120 + len(x.StepID) + len(x.Name) + len(x.Description) + len(x.Timestamp) + len(x.ParentStepID)
			walk(x.Input, depth+1)
			walk(x.Output, depth+1)
			walk(x.Metadata, depth+1)
		default:
			n += 64
		}
	}
	walk(v, 0)
	return n, n > limit
}

// toJSON(x) is expr's builtin (indented JSON), refused when it would build
// more than one value may have.
func toJSONHelper(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 1 {
		return nil, fmt.Errorf("toJSON takes 1 argument, got %d", len(params))
	}
	size, over := sizeOf(params[0], maxBuild/2) // indentation can double it
	if over {
		return nil, &BudgetError{Kind: "memory", Detail: fmt.Sprintf("toJSON would build more than the %d MiB one value may have", maxBuild>>20)}
	}
	if m != nil {
		if err := m.grow(2 * size); err != nil {
			return nil, err
		}
	}
	b, err := json.MarshalIndent(params[0], "", "  ")
	if err != nil {
		return nil, fmt.Errorf("toJSON: %w", err)
	}
	return string(b), nil
}

// repeat(s, n), replace(s, old, new) and join(list[, sep]) are expr's
// builtins with their size known, and refused, before they build anything.
func repeatHelper(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 2 {
		return nil, fmt.Errorf("repeat takes 2 arguments (text, count), got %d", len(params))
	}
	s, ok := params[0].(string)
	if !ok {
		return nil, fmt.Errorf("repeat: the text must be a string, not %T", params[0])
	}
	n, ok := toInt(params[1])
	if !ok || n < 0 {
		return nil, fmt.Errorf("repeat: the count must be a non-negative integer, not %v", params[1])
	}
	if err := buildSize(m, "repeat", int64(len(s))*int64(n)); err != nil {
		return nil, err
	}
	return strings.Repeat(s, n), nil
}

func replaceHelper(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 3 {
		return nil, fmt.Errorf("replace takes 3 arguments (text, old, new), got %d", len(params))
	}
	var strs [3]string
	for i, p := range params {
		s, ok := p.(string)
		if !ok {
			return nil, fmt.Errorf("replace: arguments must be strings, not %T", p)
		}
		strs[i] = s
	}
	s, old, repl := strs[0], strs[1], strs[2]
	n := int64(strings.Count(s, old))
	if err := buildSize(m, "replace", int64(len(s))+n*int64(len(repl)-len(old))); err != nil {
		return nil, err
	}
	return strings.ReplaceAll(s, old, repl), nil
}

func joinHelper(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) < 1 || len(params) > 2 {
		return nil, fmt.Errorf("join takes 1 or 2 arguments (list, separator), got %d", len(params))
	}
	sep := ""
	if len(params) == 2 {
		s, ok := params[1].(string)
		if !ok {
			return nil, fmt.Errorf("join: the separator must be a string, not %T", params[1])
		}
		sep = s
	}
	var parts []string
	switch l := params[0].(type) {
	case []string:
		parts = l
	case []any:
		parts = make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("join: element %d is %T, not a string (map it through text() first)", i, e)
			}
			parts[i] = s
		}
	default:
		return nil, fmt.Errorf("join: the first argument must be a list of strings, not %T", params[0])
	}
	size := int64(len(sep)) * int64(max(len(parts)-1, 0))
	for _, p := range parts {
		size += int64(len(p))
	}
	if err := buildSize(m, "join", size); err != nil {
		return nil, err
	}
	return strings.Join(parts, sep), nil
}

// buildSize refuses a string over maxBuild, and counts it against the run.
func buildSize(m *meter, helper string, size int64) error {
	if size > maxBuild {
		return &BudgetError{Kind: "memory", Detail: fmt.Sprintf("%s would build %d MiB, over the %d MiB one value may have", helper, size>>20, maxBuild>>20)}
	}
	if m != nil && size >= bigValue {
		return m.grow(int(size))
	}
	return nil
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		return int(n), n == float64(int(n))
	}
	return 0, false
}

// detector turns a detect function into a policy helper: it reads any value
// as text and returns its findings as a list of maps (.kind, .description,
// .value, …), empty when nothing is found.
func detector(find func(string) []detect.Finding) func(params ...any) (any, error) {
	var memo detectorMemo
	return func(params ...any) (any, error) {
		m, params := meterOf(params)
		if len(params) != 1 {
			return nil, fmt.Errorf("detectors take 1 argument (the text), got %d", len(params))
		}
		var text string
		if m == nil {
			text = Text(params[0])
		} else {
			var err error
			if text, err = m.text(params[0]); err != nil {
				return nil, err
			}
		}
		if out, ok := memo.get(text); ok {
			return out, nil
		}
		fs := find(text)
		out := make([]any, len(fs))
		for i, f := range fs {
			out[i] = f.Map()
		}
		memo.put(text, out)
		return out, nil
	}
}

// detectorMemo remembers a detector's findings for recent texts: the same
// history is scanned again on every guard check of a session, and by every
// rule that reads it. Findings are read-only to conditions, so sharing them
// is safe. Bounded: it starts over when full.
type detectorMemo struct {
	mu sync.RWMutex
	m  map[string][]any
	n  int // bytes of text held
}

const (
	memoMaxText  = 4 << 10  // longer texts are not remembered
	memoMaxBytes = 16 << 20 // per detector
)

func (d *detectorMemo) get(text string) ([]any, bool) {
	if len(text) > memoMaxText {
		return nil, false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	out, ok := d.m[text]
	return out, ok
}

func (d *detectorMemo) put(text string, out []any) {
	if len(text) > memoMaxText {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || d.n+len(text) > memoMaxBytes {
		d.m, d.n = map[string][]any{}, 0
	}
	d.m[text] = out
	d.n += len(text)
}

// json(x): a JSON string parsed into maps and lists; nil when x is not a
// string holding JSON (maps and lists come back as they are), so a policy
// can read structured tool output: (json(step.output) ?? {}).sender.
func jsonHelper(params ...any) (any, error) {
	m, params := meterOf(params)
	if len(params) != 1 {
		return nil, fmt.Errorf("json takes 1 argument, got %d", len(params))
	}
	if s, ok := params[0].(string); ok && m != nil && len(s) >= bigValue {
		if err := m.grow(2 * len(s)); err != nil { // parsed values take about twice their text
			return nil, err
		}
	}
	switch v := params[0].(type) {
	case map[string]any, []any:
		return v, nil
	case string:
		var out any
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			return nil, nil
		}
		return out, nil
	}
	return nil, nil
}

// py_in(container, item) is Python's `item in container`, for the policies
// of troy's predecessor (troy policies import writes it): a substring of a
// string, an element of a list, a key of a mapping. A container Python
// would refuse (None, a number) is an error, as it was there.
func pyIn(params ...any) (any, error) {
	if len(params) != 2 {
		return nil, fmt.Errorf("py_in takes 2 arguments (container, item), got %d", len(params))
	}
	switch c := params[0].(type) {
	case string:
		s, ok := params[1].(string)
		if !ok {
			return nil, fmt.Errorf("py_in: `x in <text>` needs text on the left, not %s", typeName(params[1]))
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, e := range c {
			if looseEqual(e, params[1]) {
				return true, nil
			}
		}
		return false, nil
	case map[string]any:
		k, ok := params[1].(string)
		if !ok {
			return false, nil
		}
		_, has := c[k]
		return has, nil
	}
	return nil, fmt.Errorf("py_in: `x in y` needs text, a list or a mapping on the right, not %s", typeName(params[0]))
}

// looseEqual compares as Python does across int and float.
func looseEqual(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// py_str(x) is Python's str() for the values a trace holds: None, True and
// False spelled as Python does, whole numbers without a decimal point (a
// JSON integer is an int there).
func pyStr(params ...any) (any, error) {
	if len(params) != 1 {
		return nil, fmt.Errorf("py_str takes 1 argument, got %d", len(params))
	}
	switch v := params[0].(type) {
	case nil:
		return "None", nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case string:
		return v, nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatInt(int64(v), 10), nil
		}
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	}
	return nil, fmt.Errorf("py_str of %s is not supported (Python's repr of lists and dicts differs from JSON)", typeName(params[0]))
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case string:
		return "text"
	case bool:
		return "a boolean"
	case int, int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}
