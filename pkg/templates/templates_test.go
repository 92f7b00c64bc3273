package templates

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func engineFor(t *testing.T, name string) *policy.Engine {
	t.Helper()
	p, err := Load(name)
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err, name)
	return e
}

func traceOf(t *testing.T, steps []map[string]any) *trace.Trace {
	t.Helper()
	raw := make([]any, len(steps))
	for i, s := range steps {
		s["step_id"] = fmt.Sprint(i + 1)
		raw[i] = s
	}
	b, err := json.Marshal(map[string]any{"trace_id": "case", "agent_name": "agent",
		"metadata": map[string]any{"permission_level": "user", "role": "assistant"}, "steps": raw})
	require.NoError(t, err)
	tr, err := trace.Parse(b, trace.DefaultLimits())
	require.NoError(t, err)
	return tr
}

func TestEveryTemplateLoadsAndDescribesItsRules(t *testing.T) {
	require.Equal(t, []string{"agent_safety", "data_protection", "hipaa", "minimal", "owasp_llm_top10", "safe_browsing", "soc2"}, Names())
	compliance := map[string]string{"soc2": "SOC 2 ", "hipaa": "HIPAA ", "owasp_llm_top10": "OWASP LLM"}
	for _, n := range Names() {
		e := engineFor(t, n)
		assert.Equal(t, n, e.Policy().PolicyID)
		for _, r := range e.Policy().Rules {
			assert.NotEmpty(t, r.Description, "%s/%s", n, r.RuleID)
			if prefix, ok := compliance[n]; ok {
				require.NotEmpty(t, r.Controls, "%s/%s maps to a control", n, r.RuleID)
				assert.True(t, strings.HasPrefix(r.Controls[0], prefix), "%s/%s: %v", n, r.RuleID, r.Controls)
			}
		}
	}
}

// Each rule fires on its case; a clean trace fires nothing in any template.
func TestEveryRuleFiresOnItsCaseAndNothingFiresOnCleanTraces(t *testing.T) {
	raw, err := os.ReadFile("testdata/fires.yaml")
	require.NoError(t, err)
	var cases map[string]map[string][]map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &cases))

	var cleans []*trace.Trace
	for _, f := range []string{"testdata/clean.json", "../../examples/traces/clean_run.json"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tr, err := trace.Parse(b, trace.DefaultLimits())
		require.NoError(t, err)
		cleans = append(cleans, tr)
	}
	for _, n := range Names() {
		e := engineFor(t, n)
		for _, r := range e.Policy().Rules {
			t.Run(n+"/"+r.RuleID, func(t *testing.T) {
				steps, ok := cases[n][r.RuleID]
				require.True(t, ok, "no case for this rule in testdata/fires.yaml")
				res := e.Evaluate(traceOf(t, steps))
				assert.Empty(t, res.RuleErrors)
				var fired []string
				for _, v := range res.Violations {
					fired = append(fired, v.RuleID)
				}
				assert.Contains(t, fired, r.RuleID)
			})
		}
		for _, tr := range cleans {
			res := e.Evaluate(tr)
			assert.Empty(t, res.Violations, "%s on %s", n, tr.TraceID)
			assert.Empty(t, res.RuleErrors, "%s on %s", n, tr.TraceID)
		}
	}
}

func TestMergeKeepsRuleIDsUnique(t *testing.T) {
	p, err := Merge("mine", "soc2", "hipaa", "minimal", "agent_safety")
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, r := range p.Rules {
		assert.False(t, ids[r.RuleID], "duplicate %s", r.RuleID)
		ids[r.RuleID] = true
	}
	assert.True(t, ids["agent_safety.destructive-shell-command"], "the later copy is prefixed")
	assert.True(t, ids["destructive-shell-command"])
	_, err = policy.Compile(p)
	assert.NoError(t, err)
	_, err = Merge("x", "nope")
	assert.ErrorContains(t, err, `no template "nope": choose one of agent_safety,`)
}

// agentInstructFalsePositives reports agent_safety's violations over the
// AgentInstruct fixtures (195 benign bash-agent runs); the note quotes it.
func TestAgentSafetyFalsePositivesOnAgentInstruct(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "fixtures", "agent-instruct", "agent_instruct_os.jsonl"))
	require.NoError(t, err)
	e := engineFor(t, "agent_safety")
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	byRule := map[string]int{}
	tracesWith := 0
	for i, line := range lines {
		var msgs []any
		require.NoError(t, json.Unmarshal([]byte(line), &msgs), "line %d", i+1)
		tr, err := trace.FromMessages(fmt.Sprintf("ai-%d", i+1), "os-agent", msgs)
		require.NoError(t, err, "line %d", i+1)
		res := e.Evaluate(tr)
		assert.Empty(t, res.RuleErrors, "line %d", i+1)
		if len(res.Violations) > 0 {
			tracesWith++
		}
		for _, v := range res.Violations {
			byRule[v.RuleID]++
		}
	}
	var rules []string
	for r, n := range byRule {
		rules = append(rules, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(rules)
	t.Logf("agent_safety over %d AgentInstruct traces: %d traces with violations; by rule: %v", len(lines), tracesWith, rules)
	// A regression guard, not a target: raise only with a reason in the note.
	assert.LessOrEqual(t, tracesWith, 10)
}
