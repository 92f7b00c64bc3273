package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
)

// Limits bound what one trace may contain; a trace over a limit is rejected.
type Limits struct {
	MaxBytes int // size of the raw document
	MaxSteps int
}

// DefaultLimits fit comfortably in one NATS message of the embedded server.
func DefaultLimits() Limits { return Limits{MaxBytes: 4 << 20, MaxSteps: 10_000} }

// Problem is one thing wrong with a trace document, located by JSON path.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// InvalidError carries every problem found in one trace document.
type InvalidError struct {
	TraceID  string    `json:"trace_id,omitempty"` // when the document had one
	Problems []Problem `json:"problems"`
}

func (e *InvalidError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.String()
	}
	return "invalid trace: " + strings.Join(msgs, "; ")
}

// ErrInvalid is matched by errors.Is for every *InvalidError.
var ErrInvalid = errors.New("invalid trace")

func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Parse validates a raw trace document and returns it in canonical form, or an
// *InvalidError listing every problem found.
func Parse(data []byte, lim Limits) (*Trace, error) {
	data = TrimBOM(data)
	if lim.MaxBytes > 0 && len(data) > lim.MaxBytes {
		return nil, &InvalidError{Problems: []Problem{{Message: fmt.Sprintf(
			"trace is %d bytes, over the %d-byte limit: split it or raise the limit (--max-trace-bytes)", len(data), lim.MaxBytes)}}}
	}
	var doc any
	// The fast decoder handles the common, valid case; encoding/json re-reads
	// a document that fails, for its exact error positions.
	if err := gojson.Unmarshal(data, &doc); err != nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		doc = nil
		if err := dec.Decode(&doc); err != nil {
			return nil, &InvalidError{Problems: []Problem{{Message: jsonErrorMessage(data, err)}}}
		}
		if dec.More() {
			off := int(dec.InputOffset())
			line, col := lineCol(data, off)
			return nil, &InvalidError{Problems: []Problem{{Message: fmt.Sprintf(
				"bad JSON at line %d, column %d: more than one JSON value (a .jsonl file holds one trace per line)", line, col)}}}
		}
		return nil, &InvalidError{Problems: []Problem{{Message: "bad JSON: " + err.Error()}}}
	}
	v := &validator{lim: lim}
	t := v.trace(doc)
	if len(v.problems) > 0 {
		e := &InvalidError{Problems: v.problems}
		if t != nil {
			e.TraceID = t.TraceID
		}
		return nil, e
	}
	return t, nil
}

func jsonErrorMessage(data []byte, err error) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "bad JSON: the document is empty"
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := lineCol(data, int(syn.Offset)-1) // Offset is just past the bad byte
		return fmt.Sprintf("bad JSON at line %d, column %d: %s", line, col, syn.Error())
	}
	if strings.Contains(err.Error(), "unexpected EOF") {
		line, col := lineCol(data, len(data))
		return fmt.Sprintf("bad JSON at line %d, column %d: unexpected end of input (truncated file?)", line, col)
	}
	return "bad JSON: " + err.Error()
}

var bom = []byte("\xef\xbb\xbf")

// TrimBOM drops a UTF-8 byte order mark, which editors on Windows write and
// JSON forbids.
func TrimBOM(data []byte) []byte { return bytes.TrimPrefix(data, bom) }

// lineCol turns a byte offset into 1-based line and column numbers.
func lineCol(data []byte, off int) (int, int) {
	off = min(max(off, 0), len(data))
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

type validator struct {
	lim      Limits
	problems []Problem
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) trace(doc any) *Trace {
	obj, ok := doc.(map[string]any)
	if !ok {
		v.add("", "a trace must be a JSON object with trace_id, agent_name and steps, not %s", kindOf(doc))
		return nil
	}
	t := &Trace{}
	t.TraceID = v.requiredString(obj, "", "trace_id")
	if t.TraceID != "" {
		if err := ValidateID(t.TraceID); err != nil {
			v.add("trace_id", "%v", err)
		}
	}
	t.AgentName = v.requiredString(obj, "", "agent_name")
	t.Metadata = v.optionalObject(obj, "", "metadata")
	raw, present := obj["steps"]
	steps, isList := raw.([]any)
	switch {
	case !present:
		v.add("steps", "missing: a trace needs a list of steps")
	case !isList:
		v.add("steps", "must be a list of steps, not %s", kindOf(raw))
	case len(steps) == 0:
		v.add("steps", "is empty: a trace needs at least one step")
	case v.lim.MaxSteps > 0 && len(steps) > v.lim.MaxSteps:
		v.add("steps", "has %d steps, over the %d-step limit: split the trace or raise the limit (--max-steps)", len(steps), v.lim.MaxSteps)
		steps = nil
	}
	seen := make(map[string]int, len(steps))
	for i, rs := range steps {
		s := v.step(fmt.Sprintf("steps[%d]", i), rs)
		if s == nil {
			continue
		}
		if s.StepID != "" {
			if first, dup := seen[s.StepID]; dup {
				v.add(fmt.Sprintf("steps[%d].step_id", i), "%q is also the id of steps[%d]: step ids must be unique", s.StepID, first)
			} else {
				seen[s.StepID] = i
			}
		}
		t.Steps = append(t.Steps, s)
	}
	v.parents(t, seen)
	return t
}

func (v *validator) step(path string, raw any) *Step {
	obj, ok := raw.(map[string]any)
	if !ok {
		v.add(path, "a step must be a JSON object, not %s", kindOf(raw))
		return nil
	}
	s := &Step{}
	s.StepID = v.idString(obj, path, "step_id")
	if typ := v.requiredString(obj, path, "type"); typ != "" {
		norm := strings.ToLower(strings.TrimSpace(typ))
		if !isStepType(norm) {
			v.add(path+".type", "%q is not one of %s", typ, strings.Join(StepTypes, ", "))
		}
		s.Type = norm
	}
	s.Name = v.optionalString(obj, path, "name")
	s.Description = v.optionalString(obj, path, "description")
	s.Input = obj["input"]
	s.Output = obj["output"]
	s.Metadata = v.optionalObject(obj, path, "metadata")
	if s.Name == "" {
		s.Name = toolName(s.Input)
	}
	if ts, ok := obj["timestamp"]; ok && ts != nil {
		str, isStr := ts.(string)
		if !isStr {
			v.add(path+".timestamp", "must be an ISO 8601 string such as \"2026-02-15T11:00:00Z\", not %s", kindOf(ts))
		} else if norm, err := normalizeTime(str); err != nil {
			v.add(path+".timestamp", "%q is not an ISO 8601 time: write it like \"2026-02-15T11:00:00Z\"", str)
		} else {
			s.Timestamp = norm
		}
	}
	if p, ok := obj["parent_step_id"]; ok && p != nil {
		switch pv := p.(type) {
		case string:
			s.ParentStepID = pv
		case float64:
			s.ParentStepID = strconv.FormatFloat(pv, 'f', -1, 64)
		default:
			v.add(path+".parent_step_id", "must be a step id (string) or null, not %s", kindOf(p))
		}
	}
	return s
}

// parents checks that every parent exists and that parent links form no
// cycle, in time linear in the number of steps. A duplicated id names its
// first step (the duplicate itself is reported on its own).
func (v *validator) parents(t *Trace, index map[string]int) {
	parent := make([]int, len(t.Steps))
	for i, s := range t.Steps {
		parent[i] = -1
		if s.ParentStepID == "" {
			continue
		}
		if j, ok := index[s.ParentStepID]; ok {
			parent[i] = j
		} else {
			v.add(fmt.Sprintf("steps[%d].parent_step_id", i), "%q names no step in this trace", s.ParentStepID)
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(t.Steps))
	var path []int
	for i := range t.Steps {
		path = path[:0]
		j := i
		for j >= 0 && state[j] == unseen {
			state[j] = onPath
			path = append(path, j)
			j = parent[j]
		}
		if j >= 0 && state[j] == onPath { // the walk came back to itself
			var ids []string
			for k := j; ; k = parent[k] {
				ids = append(ids, t.Steps[k].StepID)
				if parent[k] == j {
					break
				}
			}
			ids = append(ids, t.Steps[j].StepID)
			if len(ids) > 12 {
				ids = append(append(ids[:5:5], fmt.Sprintf("… %d more …", len(ids)-10)), ids[len(ids)-5:]...)
			}
			v.add(fmt.Sprintf("steps[%d].parent_step_id", j), "parent links form a cycle (%s): a step cannot be its own ancestor", strings.Join(ids, " → "))
		}
		for _, k := range path {
			state[k] = done
		}
	}
}

func (v *validator) requiredString(obj map[string]any, base, key string) string {
	path := join(base, key)
	raw, ok := obj[key]
	if !ok || raw == nil {
		v.add(path, "missing: %s is required", key)
		return ""
	}
	s, ok := raw.(string)
	if !ok {
		v.add(path, "must be a string, not %s", kindOf(raw))
		return ""
	}
	if strings.TrimSpace(s) == "" {
		v.add(path, "is empty: %s is required", key)
	}
	return s
}

// idString accepts numeric ids too, since many exporters number their steps.
func (v *validator) idString(obj map[string]any, base, key string) string {
	if f, ok := obj[key].(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return v.requiredString(obj, base, key)
}

func (v *validator) optionalString(obj map[string]any, base, key string) string {
	raw, ok := obj[key]
	if !ok || raw == nil {
		return ""
	}
	s, ok := raw.(string)
	if !ok {
		v.add(join(base, key), "must be a string, not %s", kindOf(raw))
	}
	return s
}

func (v *validator) optionalObject(obj map[string]any, base, key string) map[string]any {
	raw, ok := obj[key]
	if !ok || raw == nil {
		return nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		v.add(join(base, key), "must be a JSON object, not %s", kindOf(raw))
	}
	return m
}

func join(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

func isStepType(s string) bool {
	for _, t := range StepTypes {
		if s == t {
			return true
		}
	}
	return false
}

// toolName finds the tool or model name a step's input commonly carries.
func toolName(input any) string {
	m, ok := input.(map[string]any)
	if !ok {
		return ""
	}
	for _, k := range []string{"tool", "tool_name", "model"} {
		if s, ok := m[k].(string); ok {
			return s
		}
	}
	return ""
}

var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

// normalizeTime parses the common ISO 8601 shapes; a time without a zone is UTC.
func normalizeTime(s string) (string, error) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, strings.TrimSpace(s)); err == nil {
			return t.UTC().Format(time.RFC3339Nano), nil
		}
	}
	return "", fmt.Errorf("unparsable time %q", s)
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("a string (%q)", truncate(x, 40))
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ParseSteps validates steps sent on their own (a streamed trace): one step
// object or a list of them. Parents may name steps sent earlier, so they are
// checked when the whole trace is audited.
func ParseSteps(data []byte, lim Limits) ([]*Step, error) {
	data = TrimBOM(data)
	if lim.MaxBytes > 0 && len(data) > lim.MaxBytes {
		return nil, &InvalidError{Problems: []Problem{{Message: fmt.Sprintf(
			"%d bytes of steps, over the %d-byte limit", len(data), lim.MaxBytes)}}}
	}
	var doc any
	if err := gojson.Unmarshal(data, &doc); err != nil {
		return nil, &InvalidError{Problems: []Problem{{Message: jsonErrorMessage(data, json.Unmarshal(data, &doc))}}}
	}
	list, ok := doc.([]any)
	if !ok {
		list = []any{doc}
	}
	v := &validator{lim: lim}
	var out []*Step
	seen := map[string]int{}
	for i, raw := range list {
		path := fmt.Sprintf("steps[%d]", i)
		s := v.step(path, raw)
		if s == nil {
			continue
		}
		if j, dup := seen[s.StepID]; dup && s.StepID != "" {
			v.add(path+".step_id", "%q is also the id of steps[%d]: step ids must be unique", s.StepID, j)
		}
		seen[s.StepID] = i
		out = append(out, s)
	}
	if len(list) == 0 {
		v.add("steps", "is empty: send at least one step")
	}
	if len(v.problems) > 0 {
		return nil, &InvalidError{Problems: v.problems}
	}
	return out, nil
}
