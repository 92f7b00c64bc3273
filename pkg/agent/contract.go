package agent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/troy-audit/troy/pkg/llm"
)

// Plan is what ANALYZE must produce inside <plan>…</plan>.
type Plan struct {
	GoalRestatement string     `json:"goal_restatement"`
	Steps           []PlanStep `json:"steps"`
	NextAction      NextAction `json:"next_action"`
}

// PlanStep is one step of a plan.
type PlanStep struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Done        bool   `json:"done"`
}

// NextAction commits the next iteration to one tool, with a reason.
type NextAction struct {
	StepID          string `json:"step_id"`
	Tool            string `json:"tool"`
	Rationale       string `json:"rationale"`
	SuccessCriteria string `json:"success_criteria"`
}

// Evaluation is what OBSERVE must produce inside <evaluation>…</evaluation>.
type Evaluation struct {
	Outcome          string   `json:"outcome"`
	Evidence         string   `json:"evidence"`
	CompletedStepIDs []string `json:"completed_step_ids"`
	GoalStatus       string   `json:"goal_status"`
	NextStep         string   `json:"next_step"`
}

// Violation is a phase output that broke its contract.
type Violation struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

var (
	planTag = regexp.MustCompile(`(?s)<plan>(.*?)</plan>`)
	evalTag = regexp.MustCompile(`(?s)<evaluation>(.*?)</evaluation>`)
)

// lastTagged is the body of the last match: a model that drafts and then
// corrects itself means the correction.
func lastTagged(re *regexp.Regexp, text string) (string, bool) {
	m := re.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return "", false
	}
	return strings.TrimSpace(m[len(m)-1][1]), true
}

// decodeStrict decodes a JSON object; unknown keys are ignored (models add
// them) but types must match.
func decodeStrict(body string, v any) error {
	return json.Unmarshal([]byte(body), v)
}

// ParsePlan checks ANALYZE's output. toolKnown, when set, also checks the
// committed tool exists, so a plan naming a missing tool is corrected here
// instead of burning ACT attempts.
func ParsePlan(text string, toolKnown func(string) bool, tools []string) (*Plan, error) {
	body, ok := lastTagged(planTag, text)
	if !ok {
		return nil, fmt.Errorf("no <plan> block found")
	}
	var p Plan
	if err := decodeStrict(body, &p); err != nil {
		return nil, fmt.Errorf("invalid JSON in <plan>: %v", err)
	}
	var missing []string
	if strings.TrimSpace(p.GoalRestatement) == "" {
		missing = append(missing, "goal_restatement must be a non-empty string")
	}
	if len(p.Steps) == 0 {
		missing = append(missing, "steps must list at least one step")
	}
	for i, s := range p.Steps {
		if strings.TrimSpace(s.ID) == "" || strings.TrimSpace(s.Description) == "" {
			missing = append(missing, fmt.Sprintf("steps[%d] needs a non-empty id and description", i))
		}
	}
	na := p.NextAction
	for _, f := range []struct{ name, v string }{{"step_id", na.StepID}, {"tool", na.Tool}, {"rationale", na.Rationale}, {"success_criteria", na.SuccessCriteria}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, "next_action."+f.name+" must be a non-empty string")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("plan failed schema validation: %s", strings.Join(missing, "; "))
	}
	if !slices.ContainsFunc(p.Steps, func(s PlanStep) bool { return s.ID == na.StepID }) {
		return nil, fmt.Errorf("next_action.step_id does not reference a declared step")
	}
	if toolKnown != nil && !toolKnown(na.Tool) {
		return nil, fmt.Errorf("next_action.tool '%s' is not a registered tool (available: %s)", na.Tool, strings.Join(tools, ", "))
	}
	return &p, nil
}

// MinEvidence is the shortest evidence that counts as evidence.
const MinEvidence = 10

// ParseEvaluation checks OBSERVE's output against the current plan.
func ParseEvaluation(text string, plan *Plan) (*Evaluation, error) {
	body, ok := lastTagged(evalTag, text)
	if !ok {
		return nil, fmt.Errorf("no <evaluation> block found")
	}
	var e Evaluation
	if err := decodeStrict(body, &e); err != nil {
		return nil, fmt.Errorf("invalid JSON in <evaluation>: %v", err)
	}
	var bad []string
	if !slices.Contains([]string{"success", "partial", "failure"}, e.Outcome) {
		bad = append(bad, fmt.Sprintf("outcome must be success, partial or failure (got %q)", e.Outcome))
	}
	if !slices.Contains([]string{"complete", "in_progress", "blocked"}, e.GoalStatus) {
		bad = append(bad, fmt.Sprintf("goal_status must be complete, in_progress or blocked (got %q)", e.GoalStatus))
	}
	if strings.TrimSpace(e.NextStep) == "" {
		bad = append(bad, "next_step must be a non-empty string")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("evaluation failed schema validation: %s", strings.Join(bad, "; "))
	}
	if len(strings.TrimSpace(e.Evidence)) < MinEvidence {
		return nil, fmt.Errorf("evidence too short to be evidence")
	}
	if e.CompletedStepIDs == nil {
		e.CompletedStepIDs = []string{}
	}
	var unknown []string
	for _, id := range e.CompletedStepIDs {
		if plan == nil || !slices.ContainsFunc(plan.Steps, func(s PlanStep) bool { return s.ID == id }) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		b, _ := json.Marshal(unknown)
		return nil, fmt.Errorf("completed_step_ids references unknown steps: %s", b)
	}
	return &e, nil
}

// CheckToolChoice checks ACT's output: exactly one call, to the tool the plan
// committed to, which must exist.
func CheckToolChoice(calls []llm.ToolCall, plan *Plan, known func(string) bool) error {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	q, _ := json.Marshal(names)
	switch {
	case len(calls) == 0:
		return fmt.Errorf("no tool called")
	case len(calls) > 1:
		return fmt.Errorf("called multiple tools in one iteration: %s", q)
	case calls[0].Name != plan.NextAction.Tool:
		return fmt.Errorf("plan committed to '%s' but called %s", plan.NextAction.Tool, strings.ReplaceAll(string(q), `"`, "'"))
	case !known(calls[0].Name):
		return fmt.Errorf("'%s' is not a registered tool", calls[0].Name)
	}
	return nil
}
