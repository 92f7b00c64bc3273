package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troy-audit/troy/pkg/trace"
)

func fuzzTrace() *trace.Trace {
	return &trace.Trace{TraceID: "t", AgentName: "a", Metadata: map[string]any{"k": "v"}, Steps: []*trace.Step{
		{StepID: "1", Type: "tool_call", Name: "crm", Input: map[string]any{"q": "x", "n": 2.0, "l": []any{"a", 1.0}}, Metadata: map[string]any{"data_classification": "pii"}},
		{StepID: "2", Type: "llm_call", Output: "hello sk-live-abc ignore previous instructions"},
		{StepID: "3", Type: "tool_call", Name: "http_post", Input: "https://example.com", ParentStepID: "1"},
		// big enough that a runaway condition shows as a slow input
		{StepID: "4", Type: "observation", Output: strings.Repeat("lorem ipsum ", 8<<10)},
	}}
}

// evaluateBounded runs an engine with small budgets: whatever the policy,
// evaluation ends and every outcome is a violation or a rule error.
func evaluateBounded(t *testing.T, p *Policy) {
	t.Helper()
	e, err := CompileWith(p, Options{Budget: 50 * time.Millisecond, MemoryBudget: 16 << 20})
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("a compile error must be a policy error, got %T %v", err, err)
		}
		return
	}
	res := e.Evaluate(fuzzTrace())
	for _, v := range res.Violations {
		if _, ok := p.Rule(v.RuleID); !ok {
			t.Fatalf("violation of an unknown rule %q", v.RuleID)
		}
	}
	e.EvaluateStep(fuzzTrace(), 3)
}

func FuzzPolicy(f *testing.F) {
	paths, _ := filepath.Glob("../../examples/policy.yaml")
	more, _ := filepath.Glob("../../examples/policies/invariant/*.yaml")
	for _, p := range append(paths, more...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"policy_id":"p","on_error":"allow","rules":[{"rule_id":"r","condition":"true"}]}`))
	f.Add([]byte("policy_id: p\nrules: [{rule_id: r, condition: 'len(steps) > 1'}]"))
	f.Add([]byte("policy_id: p\nbase: &b {severity: high}\nrules:\n  - <<: *b\n    rule_id: r\n    condition: *c\n"))
	f.Add([]byte("policy_id: p\nrules:\n  - rule_id: r\n    condition: true\n    weigth: x\n  - [1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// every problem at once, Python translated: still only policy errors
		if _, err := ParseEngine(data, Options{Budget: 50 * time.Millisecond, MemoryBudget: 16 << 20}); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("a load error must be a policy error, got %T %v", err, err)
		}
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("a parse error must be a policy error, got %T %v", err, err)
			}
			return
		}
		evaluateBounded(t, p)
	})
}

func FuzzCondition(f *testing.F) {
	for _, c := range []string{
		"step.type == 'tool_call'",
		"any_prev({ get(#, 'metadata.data_classification') == 'pii' })",
		"matches(text(step.output), `sk-[a-z]+`)",
		"len(secrets(step.output)) > 0 and next_step?.type == 'tool_call'",
		"let s = steps; count(s, {.name == step.name}) > 1",
		"reduce(steps, #acc + text(#), '') contains 'x'",
		"len(repeat('ab', 3)) == 6 and replace('a-b', '-', '+') == 'a+b' and join(['a','b'], ',') == 'a,b'",
		"json(step.output)?.a == 1",
		"step.input.n * 2 > 3",
	} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, cond string) {
		evaluateBounded(t, &Policy{PolicyID: "p", Rules: []Rule{{RuleID: "r", Condition: cond, Severity: SeverityLow}}})
	})
}

func FuzzImportPython(f *testing.F) {
	f.Add([]byte("policy_id: p\nrules:\n  - rule_id: r\n    condition: step.get('type') == 'tool_call' and 'rm' in step.get('input', {}).get('cmd', '')\n"))
	f.Add([]byte("policy_id: p\nrules:\n  - rule_id: r\n    condition: any(s.get('type') == 'x' for s in steps)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, probs := ImportPython(data)
		if p == nil || len(probs) > 0 {
			return
		}
		evaluateBounded(t, p)
	})
}
