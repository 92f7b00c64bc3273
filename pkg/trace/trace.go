// Package trace holds troy's canonical agent-trace model and turns raw trace
// documents into it, reporting every problem with its JSON path.
package trace

// Step types a canonical trace may contain.
const (
	TypeLLMCall     = "llm_call"
	TypeToolCall    = "tool_call"
	TypeDecision    = "decision"
	TypeObservation = "observation"
)

// StepTypes lists the accepted step types in the order error messages show them.
var StepTypes = []string{TypeLLMCall, TypeToolCall, TypeDecision, TypeObservation}

// Trace is one agent run in canonical form. Field tags serve both JSON and the
// policy language, so a policy sees exactly what audit.json records.
type Trace struct {
	TraceID   string         `json:"trace_id" expr:"trace_id" jsonschema:"minLength=1"`
	AgentName string         `json:"agent_name" expr:"agent_name" jsonschema:"minLength=1"`
	Metadata  map[string]any `json:"metadata,omitempty" expr:"metadata"`
	Steps     []*Step        `json:"steps" expr:"steps" jsonschema:"minItems=1"`
}

// Step is one action of an agent.
type Step struct {
	StepID       string         `json:"step_id" expr:"step_id" jsonschema:"minLength=1"`
	Type         string         `json:"type" expr:"type" jsonschema:"enum=llm_call,enum=tool_call,enum=decision,enum=observation"`
	Name         string         `json:"name,omitempty" expr:"name"`
	Description  string         `json:"description,omitempty" expr:"description"`
	Input        any            `json:"input,omitempty" expr:"input"`
	Output       any            `json:"output,omitempty" expr:"output"`
	Metadata     map[string]any `json:"metadata,omitempty" expr:"metadata"`
	Timestamp    string         `json:"timestamp,omitempty" expr:"timestamp" jsonschema:"format=date-time"`
	ParentStepID string         `json:"parent_step_id,omitempty" expr:"parent_step_id"`
}

// Field returns a top-level field of the step by its JSON name, so path lookups
// (policy get(), explanations) treat a Step like the JSON object it came from.
func (s *Step) Field(name string) (any, bool) {
	switch name {
	case "step_id":
		return s.StepID, true
	case "type":
		return s.Type, true
	case "name":
		return s.Name, s.Name != ""
	case "description":
		return s.Description, true
	case "input":
		return s.Input, s.Input != nil
	case "output":
		return s.Output, s.Output != nil
	case "metadata":
		return s.Metadata, s.Metadata != nil
	case "timestamp":
		return s.Timestamp, s.Timestamp != ""
	case "parent_step_id":
		return s.ParentStepID, s.ParentStepID != ""
	}
	return nil, false
}

// Index returns the position of each step id.
func (t *Trace) Index() map[string]int {
	idx := make(map[string]int, len(t.Steps))
	for i, s := range t.Steps {
		idx[s.StepID] = i
	}
	return idx
}
