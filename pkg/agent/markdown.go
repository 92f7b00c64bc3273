package agent

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PreviewMarkdown bounds a result preview in the markdown view.
const PreviewMarkdown = 800

// Markdown renders a run's events for people: the goal, each iteration's
// plan, call, result and evaluation, contract violations, and the outcome.
func Markdown(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		d := PlainData(e.Data)
		switch e.Type {
		case EventRunStart:
			fmt.Fprintf(&b, "# Run `%s`\n\n**Goal:** %v\n\n", e.RunID, d["goal"])
			fmt.Fprintf(&b, "*agent %s, model %v, session `%s`", e.Agent, d["model"], e.SessionID)
			if d["resumed"] == true {
				b.WriteString(", resumed")
			}
			b.WriteString("*\n\n")
		case EventIterationStart:
			fmt.Fprintf(&b, "## Iteration %d\n\n", e.Iteration)
		case EventPlanCreated:
			if steps, ok := d["steps"].([]any); ok {
				for _, s := range steps {
					m, _ := s.(map[string]any)
					mark := " "
					if m["done"] == true {
						mark = "x"
					}
					fmt.Fprintf(&b, "- [%s] `%v` %v\n", mark, m["id"], m["description"])
				}
				b.WriteString("\n")
			}
			if na, ok := d["next_action"].(map[string]any); ok {
				fmt.Fprintf(&b, "**Next action:** `%v` for step `%v`\n\n**Why:** %v\n\n**Success looks like:** %v\n\n",
					na["tool"], na["step_id"], na["rationale"], na["success_criteria"])
			}
		case EventToolCall:
			args, _ := json.MarshalIndent(d["arguments"], "", "  ")
			fmt.Fprintf(&b, "**Called** `%v`\n\n```json\n%s\n```\n\n", d["tool"], args)
		case EventToolResult:
			preview := strings.ReplaceAll(fmt.Sprint(d["preview"]), "\n", " ⏎ ")
			if len(preview) > PreviewMarkdown {
				preview = clip(preview, PreviewMarkdown) + "…"
			}
			if d["ok"] == true {
				fmt.Fprintf(&b, "**Result** (%vms)\n\n> %s\n\n", d["duration_ms"], preview)
			} else {
				fmt.Fprintf(&b, "**Result (FAILED: %v)** (%vms)\n\n> %s\n\n", d["error_code"], d["duration_ms"], preview)
			}
		case EventEvaluationCreated:
			fmt.Fprintf(&b, "**Evaluation:** %v -- goal is %v\n\n> %v\n\n**Next:** %v\n\n", d["outcome"], d["goal_status"], d["evidence"], d["next_step"])
		case EventContractViolation:
			fmt.Fprintf(&b, "> [!WARNING] Contract violation in `%s`: %v\n\n", e.Phase, d["reason"])
		case EventBudgetExceeded:
			fmt.Fprintf(&b, "> [!WARNING] Budget exceeded: %v\n\n", d["which"])
		case EventRunCancelled:
			fmt.Fprintf(&b, "> [!NOTE] Cancelled: %v\n\n", d["reason"])
		case EventError:
			fmt.Fprintf(&b, "> [!CAUTION] %v\n\n", d["message"])
		case EventRunEnd:
			fmt.Fprintf(&b, "## Outcome: %v\n\n%v\n\n*%v iterations, %v tokens, %.1fs*\n", d["status"], d["answer"], d["iterations"], d["total_tokens"], toFloat(d["duration_s"]))
		}
	}
	return b.String()
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	}
	return 0
}

// PlainData gives event data (typed values in process) the shape it has
// after JSON, the bus's shape, so both are read and recorded the same.
func PlainData(d map[string]any) map[string]any {
	b, err := json.Marshal(d)
	if err != nil {
		return d
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return d
	}
	return out
}
