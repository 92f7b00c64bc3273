package report

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func TestMarkdownShowsVerdictViolationsAndEscapesTraceText(t *testing.T) {
	a := &Audit{
		Trace: &trace.Trace{TraceID: "t|1", AgentName: "<script>bot</script>", Steps: []*trace.Step{
			{StepID: "s1", Type: "tool_call", Name: "send", Description: "line one\nline | two"},
		}},
		PolicyID: "p", PolicyHash: "sha256:0123456789abcdef", RiskScore: 40,
		SeverityCounts:    map[string]int{"critical": 1},
		ExplanationSource: "heuristic",
		Explanations:      map[string]explain.Step{"s1": {Why: "The agent sent mail.", Risks: []string{"reaches outside"}, FedBy: []string{"s0"}}},
		Violations:        []policy.Violation{{RuleID: "r1", StepID: "s1", Severity: "critical", Weight: 40, Description: "bad"}},
		RuleErrors:        []policy.RuleError{{RuleID: "r2", StepID: "s1", Error: "nil + int (line 1, column 3)\n | x\n | ^"}},
		Graph:             execgraph.Graph{Edges: []execgraph.Edge{{From: "s0", To: "s1", Kind: execgraph.KindDataFlow, Value: "a@b.c"}}},
		GeneratedAt:       time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC),
	}
	md := string(Markdown(a))
	for _, want := range []string{
		"# Audit report: t\\|1",
		"| Agent | &lt;script&gt;bot&lt;/script&gt; |",
		"| Policy | p (`0123456789ab`) |",
		"| Risk score | **40 / 100** |",
		"| Violations | 1 critical |",
		"| critical | `r1` | 0 · `s1` | 40 | bad |",
		"| `r2` | 0 · `s1` | nil + int (line 1, column 3) |",
		"line one line \\| two",
		"- **Risk:** reaches outside",
		"- ⚠ **CRITICAL** `r1`: bad",
		"- `s0` → `s1`: a@b.c",
	} {
		assert.Contains(t, md, want)
	}
	assert.NotContains(t, md, "<script>")
	assert.False(t, strings.Contains(md, "\n | ^"), "multi-line errors are cut to their first line")
}

func TestBatchTotalsAndSummary(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	b := NewBatch("p", "sha256:abc", []Entry{
		{Source: "a.json", TraceID: "a", Steps: 3, Status: StatusAudited, SeverityCounts: map[string]int{"high": 2}, RiskScore: 30, Report: "a/report.md"},
		{Source: "b.jsonl:2", Status: StatusRejected, Problems: []string{"bad JSON at line 1, column 2: x", "second"}},
	}, start, start.Add(1500*time.Millisecond))
	assert.Equal(t, 2, b.Traces)
	assert.Equal(t, 1, b.Audited)
	assert.Equal(t, 1, b.Rejected)
	assert.Equal(t, map[string]int{"critical": 0, "high": 2, "medium": 0, "low": 0}, b.SeverityCounts)
	md := string(SummaryMarkdown(b))
	assert.Contains(t, md, "2 traces: 1 audited, 1 rejected · violations: 2 high · 1.5s")
	assert.Contains(t, md, "| [a](a/report.md) | 3 | 0 | 2 | 0 | 0 | 30 | audited |")
	assert.Contains(t, md, "| — | — | — | — | — | — | — | rejected (b.jsonl:2): bad JSON at line 1, column 2: x; second |")
}

// Encoded folder names link correctly, and control characters in ids are
// not copied into summary.md (found by probing).
func TestSummaryLinksAndControlCharacters(t *testing.T) {
	b := NewBatch("p", "sha256:abc", []Entry{
		{Source: "a.json", TraceID: "odd id", Status: StatusAudited, Report: FileName("odd id") + "/" + MarkdownFile},
		{Source: "b.json", TraceID: "nul\x00id", Status: StatusRejected, Problems: []string{"bad"}},
	}, time.Now(), time.Now())
	md := string(SummaryMarkdown(b))
	assert.Contains(t, md, "[odd id](odd%2520id/report.md)")
	assert.NotContains(t, md, "\x00")
	assert.Contains(t, md, "nul\uFFFDid")
}

// A rule without a description leaves no dangling colon.
func TestNoDanglingColon(t *testing.T) {
	a := &Audit{Trace: &trace.Trace{TraceID: "t", AgentName: "a", Steps: []*trace.Step{{StepID: "s1", Type: "tool_call", Name: "x"}}},
		Violations: []policy.Violation{{RuleID: "r", StepID: "s1", Severity: "high"}}}
	var b strings.Builder
	Replay(&b, a, nil)
	assert.Contains(t, b.String(), "⚠ HIGH r\n")
	assert.NotContains(t, b.String(), "r: \n")
}

// The text replay prints trace text to a terminal: no escape sequence
// from a trace gets through (OSC 52 would reach the clipboard).
func TestReplayTextCarriesNoEscapes(t *testing.T) {
	a := &Audit{Trace: &trace.Trace{TraceID: "t", AgentName: "a\x1b[2J", Steps: []*trace.Step{
		{StepID: "s1", Type: "tool_call", Name: "x\x1b]52;c;ZXZpbA==\x07", Description: "line one\nline two"}}}}
	var b strings.Builder
	Replay(&b, a, nil)
	assert.NotContains(t, b.String(), "\x1b")
	assert.NotContains(t, b.String(), "\x07")
	assert.Contains(t, b.String(), "x]52;c;ZXZpbA==")
}
