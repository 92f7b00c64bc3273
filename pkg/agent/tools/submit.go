package tools

import (
	"context"
	"encoding/json"
)

// Submission is the answer a run ends with.
type Submission struct {
	Answer            string   `json:"answer"`
	Status            string   `json:"status"`
	Confidence        float64  `json:"confidence"`
	Evidence          []string `json:"evidence"`
	UnmetRequirements []string `json:"unmet_requirements"`
}

// Submit is the terminal tool: a run ends when it succeeds.
type Submit struct{}

// Spec implements Tool.
func (Submit) Spec() Spec {
	return Spec{
		Name:        "submit",
		Description: "Finish the run with your answer. status complete means every requirement of the goal is met; partial or blocked say what is not.",
		Safety:      ReadOnly,
		Terminal:    true,
		Returns:     "confirmation; the run ends",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["answer","status","confidence"],
 "properties":{
  "answer":{"type":"string","minLength":1},
  "status":{"type":"string","enum":["complete","partial","blocked"]},
  "confidence":{"type":"number","minimum":0,"maximum":1},
  "evidence":{"type":"array","items":{"type":"string"},"default":[]},
  "unmet_requirements":{"type":"array","items":{"type":"string"},"default":[]}}}`),
	}
}

// Run implements Tool.
func (Submit) Run(_ context.Context, env *Env, raw json.RawMessage) (Output, *Error) {
	var s Submission
	if err := json.Unmarshal(raw, &s); err != nil {
		return Output{}, Errorf(InvalidInput, "submit arguments: %v", err)
	}
	if s.Status == "complete" && len(s.UnmetRequirements) > 0 {
		return Output{}, Errorf(InvalidInput, "status complete contradicts %d unmet requirement(s).", len(s.UnmetRequirements)).
			Fix("Either meet the requirements, or submit with status partial or blocked.")
	}
	if s.Evidence == nil {
		s.Evidence = []string{}
	}
	if s.UnmetRequirements == nil {
		s.UnmetRequirements = []string{}
	}
	env.Submitted = &s
	return Output{Content: "Submitted with status=" + s.Status + "."}, nil
}
