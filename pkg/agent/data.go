package agent

import "encoding/json"

func planData(p *Plan) map[string]any {
	steps := make([]map[string]any, len(p.Steps))
	for i, s := range p.Steps {
		steps[i] = map[string]any{"id": s.ID, "description": s.Description, "done": s.Done}
	}
	return map[string]any{"goal_restatement": p.GoalRestatement, "steps": steps, "next_action": map[string]any{
		"step_id": p.NextAction.StepID, "tool": p.NextAction.Tool, "rationale": p.NextAction.Rationale,
		"success_criteria": p.NextAction.SuccessCriteria}}
}

func evalData(e *Evaluation) map[string]any {
	return map[string]any{"outcome": e.Outcome, "evidence": e.Evidence, "completed_step_ids": e.CompletedStepIDs,
		"goal_status": e.GoalStatus, "next_step": e.NextStep}
}

// rawJSON keeps arguments as JSON values in events (a string when they are
// not valid JSON).
func rawJSON(b []byte) any {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	return v
}
