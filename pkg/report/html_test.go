package report_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

// The HTML report is one file: every step in the graph and the timeline,
// coloured by its worst violation, each violation with its explanation,
// and trace text escaped (a trace is untrusted input).
func TestHTMLReportIsSelfContainedAndEscaped(t *testing.T) {
	tr := &trace.Trace{TraceID: "t<1>", AgentName: "bot", Steps: []*trace.Step{
		{StepID: "a", Type: "tool_call", Name: `<script>alert("x")</script>`, Timestamp: "2026-11-30T10:00:00Z", Output: map[string]any{"email": "a@b.c"}},
		{StepID: "b", Type: "tool_call", Name: "http_post", Timestamp: "2026-11-30T10:00:04Z", ParentStepID: "a", Input: map[string]any{"to": "a@b.c"}},
		{StepID: "c", Type: "decision", Timestamp: "2026-11-30T10:00:05Z"},
	}}
	a := &report.Audit{SchemaVersion: report.SchemaVersion, Trace: tr, PolicyID: "p", PolicyHash: "sha256:00", Graph: execgraph.Build(tr),
		ExplanationSource: "heuristic", Summary: "ran 3 steps", RiskScore: 55, GeneratedAt: time.Now(),
		SeverityCounts: map[string]int{"critical": 1, "high": 1},
		Violations: []policy.Violation{
			{RuleID: "exfil", StepID: "b", StepIndex: 1, Severity: "critical", Description: "data left"},
			{RuleID: "net", StepID: "b", StepIndex: 1, Severity: "high", Description: "external call"},
			{RuleID: "ghost", StepID: "zz", Severity: "low", Description: "names a step the trace lacks"},
		},
		RuleErrors:   []policy.RuleError{{RuleID: "broken", StepID: "c", StepIndex: 2, Error: "no field amount"}},
		Explanations: map[string]explain.Step{"b": {StepID: "b", Why: "to send the record <out>", Confidence: 0.8, Alternatives: "ask first"}},
	}
	b, err := report.HTML(a)
	require.NoError(t, err)
	page := string(b)
	assert.NotContains(t, page, `<script>alert`, "trace text is escaped")
	assert.Contains(t, page, "&lt;script&gt;")
	assert.NotRegexp(t, `(src|href)="(https?:)?//`, page, "nothing is loaded from elsewhere")
	assert.NotContains(t, page, "ZgotmplZ", "no value was refused by the template")
	assert.Equal(t, 3, strings.Count(page, `<rect class="node"`), "a node per step")
	assert.Equal(t, 3, strings.Count(page, "<circle"), "a dot per step on the timeline")
	assert.Regexp(t, `<rect class="node"[^>]*fill="#b91c1c"`, page, "the step with a critical violation is red")
	assert.Contains(t, page, `class="parent"`)
	assert.Contains(t, page, `class="flow"`, "the email flowed from a to b")
	assert.Contains(t, page, "2026-11-30T10:00:00Z – 2026-11-30T10:00:05Z (5s)")
	assert.Contains(t, page, "to send the record &lt;out&gt;", "the violation's step explanation")
	assert.Contains(t, page, "<b>Confidence:</b> 80%")
	assert.Contains(t, page, "<b>Alternatives:</b> ask first")
	assert.Contains(t, page, "no field amount", "rule errors")
	assert.Len(t, regexp.MustCompile(`id="step-\d"`).FindAllString(page, -1), 3)
	assert.Contains(t, page, "zz <span class=\"muted\">(not a step of this trace)</span>", "a violation of a missing step links nowhere")
}

func TestBatchHTMLLinksEveryTrace(t *testing.T) {
	b := report.NewBatch("p", "sha256:00", []report.Entry{
		{Source: "a.json", TraceID: "a", Steps: 3, Status: report.StatusAudited, RiskScore: 40, SeverityCounts: map[string]int{"high": 1}},
		{Source: "bad.json", Status: report.StatusRejected, Problems: []string{"not <json>"}},
	}, time.Now(), time.Now())
	page, err := report.BatchHTML(b, []report.BatchRow{{Entry: b.Entries[0], Link: "a/report.html"}, {Entry: b.Entries[1]}})
	require.NoError(t, err)
	assert.Contains(t, string(page), `<a href="a/report.html">a</a>`)
	assert.Contains(t, string(page), "not &lt;json&gt;")
	assert.Contains(t, string(page), `data-sort="num"`)
}
