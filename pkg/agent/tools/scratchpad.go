package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ReservedPrefix marks scratchpad keys the framework owns (spend, counters).
const ReservedPrefix = "_"

// Scratchpad is the run's small key-value memory; compaction never touches it.
type Scratchpad struct{}

// Spec implements Tool.
func (Scratchpad) Spec() Spec {
	return Spec{
		Name:        "scratchpad",
		Description: "Keep notes across iterations: read, write, delete or list keys. Keys starting with _ belong to troy and are read-only.",
		Safety:      MutatesState,
		Returns:     "the value, the key list, or what was done",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["action"],
 "properties":{
  "action":{"type":"string","enum":["read","write","delete","list"]},
  "key":{"type":"string","minLength":1},
  "value":{}}}`),
	}
}

// Run implements Tool.
func (Scratchpad) Run(_ context.Context, env *Env, raw json.RawMessage) (Output, *Error) {
	var a struct {
		Action string `json:"action"`
		Key    string `json:"key"`
		Value  any    `json:"value"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return Output{}, Errorf(InvalidInput, "scratchpad arguments: %v", err)
	}
	if a.Action != "list" && a.Key == "" {
		return Output{}, Errorf(InvalidInput, "`key` is required for %s.", a.Action)
	}
	if env.Scratchpad == nil {
		env.Scratchpad = map[string]any{}
	}
	if (a.Action == "write" || a.Action == "delete") && strings.HasPrefix(a.Key, ReservedPrefix) {
		return Output{}, Errorf(UnsafeOperation, "Scratchpad key '%s' is reserved for the framework.", a.Key).
			Fix("Use a key that does not start with _.")
	}
	switch a.Action {
	case "list":
		var keys []string
		for k := range env.Scratchpad {
			if !strings.HasPrefix(k, ReservedPrefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		if len(keys) == 0 {
			return Output{Content: "(empty)"}, nil
		}
		return Output{Content: strings.Join(keys, ", ")}, nil
	case "read":
		v, ok := env.Scratchpad[a.Key]
		if !ok {
			return Output{}, Errorf(NotFound, "No scratchpad key `%s`.", a.Key).Fix("List the keys first.")
		}
		if s, ok := v.(string); ok {
			return Output{Content: s}, nil
		}
		b, _ := json.Marshal(v)
		return Output{Content: string(b)}, nil
	case "write":
		env.Scratchpad[a.Key] = a.Value
		return Output{Content: fmt.Sprintf("Stored `%s`.", a.Key)}, nil
	case "delete":
		delete(env.Scratchpad, a.Key)
		return Output{Content: fmt.Sprintf("Deleted `%s` (if it existed).", a.Key)}, nil
	}
	return Output{}, Errorf(InvalidInput, "Unknown action %q.", a.Action)
}
