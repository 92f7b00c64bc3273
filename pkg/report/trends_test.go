package report_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

func TestDayTotalsAndPercentile(t *testing.T) {
	var fs []report.Findings
	for i := 1; i <= 20; i++ { // risks 5, 10, …, 100
		f := report.Findings{TraceID: "t", RiskScore: 5 * i}
		if i%4 == 0 {
			f.Violations = []policy.Violation{{RuleID: "r", Severity: "high"}}
		}
		fs = append(fs, f)
	}
	d := report.DayOf("2026-11-30", fs)
	assert.Equal(t, 20, d.Traces)
	assert.Equal(t, 5, d.BySeverity["high"])
	assert.Equal(t, 0, d.BySeverity["critical"], "every severity is there, zero or not")
	assert.InDelta(t, 52.5, d.MeanRisk, 1e-9)
	assert.Equal(t, 95, d.P95Risk, "nearest rank: the 19th of 20")
	assert.Equal(t, 0, report.DayOf("2026-11-30", nil).P95Risk, "an empty day")
}

func TestTrendsOverALogsFolder(t *testing.T) {
	dir := t.TempDir()
	_, err := report.LoadTrends(dir)
	assert.ErrorContains(t, err, "holds no day of audits")

	// two days written as troy audit-batch would, plus a folder that is not a day
	write := func(day string, rules ...string) {
		var entries []report.Entry
		for i, r := range rules {
			id := day + "-" + string(rune('a'+i))
			a := &report.Audit{SchemaVersion: report.SchemaVersion, RiskScore: 10 * (i + 1),
				Violations: []policy.Violation{{RuleID: r, StepID: "1", Severity: "medium"}}}
			a.Trace = traceWithID(id)
			writeAudit(t, dir, day+"/"+id, a)
			entries = append(entries, report.Entry{Source: id + ".json", TraceID: id, Status: report.StatusAudited, Report: id + "/report.md"})
		}
		writeBatch(t, dir, day, entries)
	}
	write("2026-11-01", "a", "a", "b")
	write("2026-11-02", "b", "b", "b", "c")
	writeAudit(t, dir, "demo/x", &report.Audit{Trace: traceWithID("x")})
	tr, err := report.LoadTrends(dir)
	require.NoError(t, err)
	require.Len(t, tr.Days, 2)
	assert.Equal(t, 3, tr.Days[0].Traces)
	assert.Equal(t, 4, tr.Days[1].BySeverity["medium"])
	assert.Equal(t, []string{"demo (not a date)"}, tr.Skipped)
	assert.Equal(t, []report.RuleMove{
		{RuleID: "a", Before: 2.0 / 3, Latest: 0}, // 2 in 3 traces, then none
		{RuleID: "b", Before: 1.0 / 3, Latest: 0.75},
		{RuleID: "c", Before: 0, Latest: 0.25},
	}, tr.Moved, "largest move first")
	var out bytes.Buffer
	tr.WriteText(&out)
	assert.Contains(t, out.String(), "2026-11-02       4")
	assert.Contains(t, out.String(), "skipped: demo (not a date)")
}

func traceWithID(id string) *trace.Trace {
	return &trace.Trace{TraceID: id, AgentName: "a", Steps: []*trace.Step{{StepID: "1", Type: "tool_call"}}}
}

func writeAudit(t *testing.T, dir, sub string, a *report.Audit) {
	t.Helper()
	b, err := json.Marshal(a)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, sub), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, sub, report.JSONFile), b, 0o644))
}

func writeBatch(t *testing.T, dir, sub string, entries []report.Entry) {
	t.Helper()
	b, err := json.Marshal(report.Batch{SchemaVersion: report.SchemaVersion, Entries: entries})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, sub, "batch.json"), b, 0o644))
}

func TestTrendsHTMLChartsEveryDay(t *testing.T) {
	tr := &report.Trends{Days: []report.Day{
		report.DayOf("2026-11-01", []report.Findings{{RiskScore: 20, Violations: []policy.Violation{{RuleID: "r", Severity: "high"}, {RuleID: "r", Severity: "low"}}}}),
		report.DayOf("2026-11-02", []report.Findings{{RiskScore: 80, Violations: []policy.Violation{{RuleID: "r", Severity: "critical"}}}}),
	}}
	b, err := report.TrendsHTML(tr)
	require.NoError(t, err)
	page := string(b)
	assert.Equal(t, 3, strings.Count(page, `<rect class="bar"`), "a bar segment per severity present per day")
	assert.Contains(t, page, "2026-11-02: 1 critical")
	assert.Equal(t, 2, strings.Count(page, "<polyline"), "mean and p95 risk")
	assert.Contains(t, page, "<td>2026-11-01</td><td>1</td>")
	assert.NotContains(t, page, "ZgotmplZ")
}
