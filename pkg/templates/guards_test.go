package templates

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

// The engine's guards (and the conditions they decide without running)
// change speed, never results: every template, and the bench policy, give
// the same violations and rule errors on generated and shipped traces as
// the same rules behind `step_index >= 0 and (…)`, which no guard
// recognises (`true and …` would be folded away by expr's optimizer).
func TestGuardsGiveTheSameResultsOnEveryTemplate(t *testing.T) {
	var traces []*trace.Trace
	for i := range 60 {
		b, err := json.Marshal(tracegen.Trace(3, i, 40))
		require.NoError(t, err)
		tr, err := trace.Parse(b, trace.DefaultLimits())
		require.NoError(t, err)
		traces = append(traces, tr)
	}
	files, _ := filepath.Glob("../../examples/traces/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tr, err := trace.ParseAny(b, trace.DefaultLimits(), "", f)
		require.NoError(t, err)
		traces = append(traces, tr)
	}
	policies := map[string]*policy.Policy{}
	for _, name := range Names() {
		p, err := Load(name)
		require.NoError(t, err)
		policies[name] = p
	}
	b, err := os.ReadFile("../policy/testdata/bench_policy.yaml")
	require.NoError(t, err)
	bench, err := policy.Parse(b)
	require.NoError(t, err)
	policies["bench"] = bench
	for name, p := range policies {
		plain := *p
		plain.Rules = make([]policy.Rule, len(p.Rules))
		for i, r := range p.Rules {
			r.Condition = "step_index >= 0 and (" + r.Condition + ")" // not a guard form, and not folded away
			plain.Rules[i] = r
		}
		ge, err := policy.Compile(p)
		require.NoError(t, err, name)
		pe, err := policy.Compile(&plain)
		require.NoError(t, err, name)
		fired := 0
		for _, tr := range traces {
			want, got := pe.Evaluate(tr), ge.Evaluate(tr)
			fired += len(got.Violations)
			assert.Equal(t, want.Violations, got.Violations, "%s on %s", name, tr.TraceID)
			assert.Equal(t, len(want.RuleErrors), len(got.RuleErrors), "%s on %s", name, tr.TraceID)
		}
		t.Logf("%s: %d violations, the same with and without guards", name, fired)
	}
}
