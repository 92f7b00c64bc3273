// Package agenttest builds scripted model answers for tests of agents:
// a plan, a tool call, an evaluation, a submission, in the shapes the
// phase contracts require.
package agenttest

import (
	"encoding/json"

	"github.com/troy-audit/troy/pkg/llm"
)

// Plan is an ANALYZE answer committing to tool for step (s1 or s2).
func Plan(step, tool string) llm.ScriptedResponse {
	plan := map[string]any{"goal_restatement": "do the thing",
		"steps":       []map[string]any{{"id": "s1", "description": "first"}, {"id": "s2", "description": "finish"}},
		"next_action": map[string]any{"step_id": step, "tool": tool, "rationale": "because " + step, "success_criteria": "it works"}}
	b, _ := json.Marshal(plan)
	return llm.ScriptedResponse{Text: "Thinking.\n<plan>" + string(b) + "</plan>"}
}

// Act is an ACT answer calling tool with args.
func Act(tool string, args map[string]any) llm.ScriptedResponse {
	return llm.ScriptedResponse{ToolCalls: []llm.ScriptedCall{{Name: tool, Arguments: args}}}
}

// Eval is an OBSERVE answer.
func Eval(outcome, evidence, goal string, done ...string) llm.ScriptedResponse {
	if done == nil {
		done = []string{}
	}
	b, _ := json.Marshal(map[string]any{"outcome": outcome, "evidence": evidence, "completed_step_ids": done,
		"goal_status": goal, "next_step": "carry on"})
	return llm.ScriptedResponse{Text: "<evaluation>" + string(b) + "</evaluation>"}
}

// Submit is an ACT answer calling submit with answer "hi".
func Submit(status string, unmet ...string) llm.ScriptedResponse {
	if unmet == nil {
		unmet = []string{}
	}
	return Act("submit", map[string]any{"answer": "hi", "status": status, "confidence": 0.9, "evidence": []string{"f.txt"}, "unmet_requirements": unmet})
}

// Write is file_system write arguments.
func Write(path, content string) map[string]any {
	return map[string]any{"operation": "write", "path": path, "content": content}
}
