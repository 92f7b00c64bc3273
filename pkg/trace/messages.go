package trace

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// FromMessages reads an OpenAI chat-format message list (as Invariant,
// tau-bench and AgentInstruct record agent runs) into a canonical trace:
//
//   - system and user messages become observations (name "system"/"user");
//   - an assistant message's text becomes an llm_call;
//   - each tool call becomes a tool_call named for the tool, its input the
//     parsed arguments (JSON strings are parsed), its output the tool's
//     result matched by tool_call_id, its parent the llm_call it came with.
//
// Tool calls may be nested in assistant messages (tool_calls) or stand alone
// as {"type": "function", "function": {…}} entries. A tool result with no
// matching call is kept as an observation named "tool".
func FromMessages(traceID, agent string, msgs []any) (*Trace, error) {
	var v validator
	t := v.messages(traceID, agent, msgs)
	if len(v.problems) > 0 {
		return nil, &InvalidError{TraceID: traceID, Problems: v.problems}
	}
	return t, nil
}

func (v *validator) messages(traceID, agent string, msgs []any) *Trace {
	t := &Trace{TraceID: traceID, AgentName: agent}
	calls := map[string]*Step{} // tool_call_id -> its step
	var lastCall *Step          // the latest call still waiting for its result
	add := func(s *Step) *Step {
		s.StepID = strconv.Itoa(len(t.Steps) + 1)
		t.Steps = append(t.Steps, s)
		return s
	}
	addCall := func(path string, c map[string]any, parent string) {
		fn, _ := c["function"].(map[string]any)
		if fn == nil {
			v.add(path+".function", "a tool call needs a function object with a name and arguments")
			return
		}
		name, _ := fn["name"].(string)
		if name == "" {
			v.add(path+".function.name", "missing: a tool call needs the tool's name")
		}
		args := fn["arguments"]
		if s, ok := args.(string); ok { // OpenAI sends arguments as a JSON string
			var parsed any
			if json.Unmarshal([]byte(s), &parsed) == nil {
				args = parsed
			}
		}
		s := add(&Step{Type: TypeToolCall, Name: name, Input: args, ParentStepID: parent})
		if id, ok := c["id"].(string); ok && id != "" {
			calls[id] = s
		}
		lastCall = s
	}
	if len(msgs) == 0 {
		v.add("messages", "is empty: a run needs at least one message")
	}
	for i, raw := range msgs {
		path := fmt.Sprintf("messages[%d]", i)
		m, ok := raw.(map[string]any)
		if !ok {
			v.add(path, "a message must be a JSON object, not %s", kindOf(raw))
			continue
		}
		role, _ := m["role"].(string)
		content := m["content"]
		switch {
		case role == "" && m["function"] != nil:
			addCall(path, m, "")
		case role == "tool" || role == "function":
			id, _ := m["tool_call_id"].(string)
			call := calls[id]
			if call == nil && id == "" && lastCall != nil && lastCall.Output == nil {
				call = lastCall
			}
			if call != nil && call.Output == nil {
				call.Output = content
				continue
			}
			add(&Step{Type: TypeObservation, Name: "tool", Output: content})
		case role == "assistant":
			parent := ""
			if str, isStr := content.(string); (isStr && str != "") || (!isStr && content != nil) {
				parent = add(&Step{Type: TypeLLMCall, Name: "assistant", Output: content}).StepID
			}
			list, _ := m["tool_calls"].([]any)
			for j, c := range list {
				cm, ok := c.(map[string]any)
				if !ok {
					v.add(fmt.Sprintf("%s.tool_calls[%d]", path, j), "a tool call must be an object")
					continue
				}
				addCall(fmt.Sprintf("%s.tool_calls[%d]", path, j), cm, parent)
			}
		case role == "user" || role == "system" || role == "developer":
			add(&Step{Type: TypeObservation, Name: role, Output: content})
		default:
			v.add(path+".role", "%q is not one of system, user, assistant, tool", role)
		}
	}
	if len(msgs) > 0 && len(t.Steps) == 0 && len(v.problems) == 0 {
		// e.g. only assistant messages without content or tool calls
		v.add("messages", "no message has content or a tool call: a run needs at least one step")
	}
	return t
}
