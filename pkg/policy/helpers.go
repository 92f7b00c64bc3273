package policy

import (
	"encoding/json"
	"fmt"
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
	if len(params) != 2 {
		return nil, fmt.Errorf("matches takes 2 arguments (text, pattern), got %d", len(params))
	}
	var m *Matcher
	switch p := params[1].(type) {
	case *Matcher:
		m = p
	case string:
		var err error
		if m, err = cachedMatcher(p); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("matches: the pattern must be a string, not %T", params[1])
	}
	return m.MatchValue(params[0]), nil
}

// text(x): any value as searchable text (JSON for maps and lists).
func text(params ...any) (any, error) {
	if len(params) != 1 {
		return nil, fmt.Errorf("text takes 1 argument, got %d", len(params))
	}
	return Text(params[0]), nil
}

// detector turns a detect function into a policy helper: it reads any value
// as text and returns its findings as a list of maps (.kind, .description,
// .value, …), empty when nothing is found.
func detector(find func(string) []detect.Finding) func(params ...any) (any, error) {
	var memo detectorMemo
	return func(params ...any) (any, error) {
		if len(params) != 1 {
			return nil, fmt.Errorf("detectors take 1 argument (the text), got %d", len(params))
		}
		text := Text(params[0])
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
	if len(params) != 1 {
		return nil, fmt.Errorf("json takes 1 argument, got %d", len(params))
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
