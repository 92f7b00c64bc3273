package trace

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// FromMessages reads an OpenAI chat-format message list (as Invariant,
// tau-bench and AgentInstruct record agent runs) into a canonical trace:
// user and system messages and tool results become observations, assistant
// text an llm_call, and each tool call a tool_call whose input is its parsed
// arguments. Tool calls may be nested in assistant messages (tool_calls) or
// stand alone as {"type": "function", "function": {…}} entries. A tool
// result's parent is its call.
func FromMessages(traceID, agent string, msgs []any) (*Trace, error) {
	t := &Trace{TraceID: traceID, AgentName: agent}
	callStep := map[string]*Step{} // tool_call_id -> its step
	add := func(s *Step) {
		s.StepID = strconv.Itoa(len(t.Steps) + 1)
		t.Steps = append(t.Steps, s)
	}
	addCall := func(i int, c map[string]any) error {
		fn, _ := c["function"].(map[string]any)
		if fn == nil {
			return fmt.Errorf("messages[%d]: a tool call needs a function", i)
		}
		name, _ := fn["name"].(string)
		args := fn["arguments"]
		if s, ok := args.(string); ok { // OpenAI sends arguments as a JSON string
			var parsed any
			if json.Unmarshal([]byte(s), &parsed) == nil {
				args = parsed
			}
		}
		s := &Step{Type: TypeToolCall, Name: name, Input: args}
		add(s)
		if id, ok := c["id"].(string); ok {
			callStep[id] = s
		}
		return nil
	}
	for i, raw := range msgs {
		m, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("messages[%d]: a message must be an object", i)
		}
		role, _ := m["role"].(string)
		content := m["content"]
		switch {
		case role == "" && m["function"] != nil:
			if err := addCall(i, m); err != nil {
				return nil, err
			}
		case role == "tool":
			s := &Step{Type: TypeObservation, Output: content}
			if id, _ := m["tool_call_id"].(string); id != "" {
				if call := callStep[id]; call != nil {
					s.Name, s.ParentStepID = call.Name, call.StepID
				}
			}
			add(s)
		case role == "assistant":
			if str, isStr := content.(string); (isStr && str != "") || (!isStr && content != nil) {
				add(&Step{Type: TypeLLMCall, Name: "assistant", Output: content})
			}
			calls, _ := m["tool_calls"].([]any)
			for _, c := range calls {
				cm, ok := c.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("messages[%d].tool_calls: a tool call must be an object", i)
				}
				if err := addCall(i, cm); err != nil {
					return nil, err
				}
			}
		case role == "user" || role == "system":
			add(&Step{Type: TypeObservation, Name: role, Output: content})
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, role)
		}
	}
	if len(t.Steps) == 0 {
		return nil, fmt.Errorf("no messages")
	}
	return t, nil
}
