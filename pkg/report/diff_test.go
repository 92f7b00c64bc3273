package report_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
)

func TestDiffRunsMatchesByTraceRuleAndStep(t *testing.T) {
	v := func(rule, step, sev string) policy.Violation {
		return policy.Violation{RuleID: rule, StepID: step, Severity: sev, Description: rule + " fired"}
	}
	old := []report.Findings{
		{TraceID: "a", RiskScore: 40, Violations: []policy.Violation{v("pii", "1", "high"), v("sql", "2", "medium")}},
		{TraceID: "b", RiskScore: 10, Violations: []policy.Violation{v("sql", "1", "medium")}},
		{TraceID: "gone", RiskScore: 90, Violations: []policy.Violation{v("pii", "1", "high")}},
	}
	cur := []report.Findings{
		{TraceID: "a", RiskScore: 70, Violations: []policy.Violation{v("pii", "1", "high"), v("shell", "3", "critical"), v("sql", "3", "medium")}},
		{TraceID: "b", RiskScore: 10, Violations: []policy.Violation{v("sql", "1", "medium")}},
		{TraceID: "fresh", RiskScore: 50, Violations: []policy.Violation{v("pii", "1", "high")}},
	}
	r := report.DiffRuns("old", old, "new", cur)
	assert.Equal(t, []report.Change{
		{TraceID: "a", RuleID: "shell", StepID: "3", Severity: "critical", Description: "shell fired"},
		{TraceID: "a", RuleID: "sql", StepID: "3", Severity: "medium", Description: "sql fired"},
	}, r.NewV, "new, most severe first; the same rule on another step is new")
	assert.Equal(t, []report.Change{{TraceID: "a", RuleID: "sql", StepID: "2", Severity: "medium", Description: "sql fired"}}, r.Fixed)
	assert.Equal(t, 2, r.Unchanged, "a's pii and b's sql")
	assert.Equal(t, []report.RiskDelta{{TraceID: "a", Old: 40, New: 70}}, r.Risk)
	assert.Equal(t, []string{"fresh"}, r.Added, "a trace only in the new run is added, its findings not counted as new")
	assert.Equal(t, []string{"gone"}, r.Missing)
	assert.Equal(t, 1, r.NewAtOrAbove("high"))
	assert.Equal(t, 2, r.NewAtOrAbove("low"))

	var out bytes.Buffer
	r.WriteText(&out)
	assert.Contains(t, out.String(), "violations: 2 new (1 critical, 1 medium), 1 fixed (1 medium), 2 unchanged")
	assert.Contains(t, out.String(), "RISK   a 40 → 70 (+30)")
	assert.Contains(t, out.String(), "MISSING gone")
	assert.Contains(t, out.String(), "traces: 3 → 3 (2 in both, 1 added, 1 missing)")

	none := report.DiffRuns("old", old[:1], "new", cur[2:])
	assert.Zero(t, none.Matched)
	out.Reset()
	none.WriteText(&out)
	assert.Contains(t, out.String(), "no trace is in both", "a diff that compared nothing says so")
}
