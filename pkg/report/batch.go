package report

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
)

// Entry is one input of a batch: an audited trace or a rejected document.
type Entry struct {
	Source         string         `json:"source"` // file, or file:line for .jsonl
	TraceID        string         `json:"trace_id,omitempty"`
	Steps          int            `json:"steps"`
	Status         string         `json:"status" jsonschema:"enum=audited,enum=rejected"`
	SeverityCounts map[string]int `json:"severity_counts,omitempty"`
	RiskScore      int            `json:"risk_score"`
	Problems       []string       `json:"problems,omitempty"` // why it was rejected
	Report         string         `json:"report,omitempty"`   // path of report.md, relative to the batch folder
	LLM            *explain.Usage `json:"llm,omitempty"`      // LLM explanation usage
	// RuleErrors: the rules that could not be evaluated on some steps
	RuleErrors []RuleErrorCount `json:"rule_errors,omitempty"`
}

// RuleErrorCount is a rule that could not be evaluated: on how many steps
// (of one trace, or of a batch's traces) and the first error.
type RuleErrorCount struct {
	RuleID string `json:"rule_id"`
	Steps  int    `json:"steps"`
	Traces int    `json:"traces,omitempty"` // in a batch
	First  string `json:"first_error"`
}

// CountRuleErrors groups rule errors by rule, in the order rules first failed.
func CountRuleErrors(errs []policy.RuleError) []RuleErrorCount {
	var out []RuleErrorCount
	at := map[string]int{}
	for _, e := range errs {
		i, ok := at[e.RuleID]
		if !ok {
			i = len(out)
			at[e.RuleID] = i
			out = append(out, RuleErrorCount{RuleID: e.RuleID, First: e.Error})
		}
		out[i].Steps++
	}
	return out
}

// RuleErrorLine is the rule errors in one line: "2 rules could not be
// evaluated on 14 steps (first: r: …)", "" for none.
func RuleErrorLine(rc []RuleErrorCount) string {
	if len(rc) == 0 {
		return ""
	}
	steps := 0
	for _, r := range rc {
		steps += r.Steps
	}
	rules := "1 rule"
	if len(rc) > 1 {
		rules = fmt.Sprintf("%d rules", len(rc))
	}
	s := "steps"
	if steps == 1 {
		s = "step"
	}
	return fmt.Sprintf("%s could not be evaluated on %d %s (first: %s: %s)", rules, steps, s, rc[0].RuleID, ruleErrorText(rc[0].First))
}

// Entry statuses.
const (
	StatusAudited  = "audited"
	StatusRejected = "rejected"
)

// Batch is batch.json: every input of one audit-batch run.
type Batch struct {
	SchemaVersion  string         `json:"schema_version"`
	PolicyID       string         `json:"policy_id"`
	PolicyHash     string         `json:"policy_hash"`
	Traces         int            `json:"traces"`
	Audited        int            `json:"audited"`
	Rejected       int            `json:"rejected"`
	SeverityCounts map[string]int `json:"severity_counts"`
	LLM            *explain.Usage `json:"llm,omitempty"` // totals over the batch
	// RuleErrors: per rule, the steps and traces it could not be evaluated on
	RuleErrors []RuleErrorCount `json:"rule_errors,omitempty"`
	Entries    []Entry          `json:"entries"`
	StartedAt  time.Time        `json:"started_at"`
	FinishedAt time.Time        `json:"finished_at"`
}

// NewBatch totals entries into a batch record.
func NewBatch(policyID, policyHash string, entries []Entry, started, finished time.Time) *Batch {
	b := &Batch{SchemaVersion: SchemaVersion, PolicyID: policyID, PolicyHash: policyHash,
		Traces: len(entries), Entries: entries, StartedAt: started, FinishedAt: finished,
		SeverityCounts: map[string]int{}}
	for _, s := range policy.Severities {
		b.SeverityCounts[s] = 0
	}
	for _, e := range entries {
		if e.Status == StatusRejected {
			b.Rejected++
			continue
		}
		b.Audited++
		for s, n := range e.SeverityCounts {
			b.SeverityCounts[s] += n
		}
		if e.LLM != nil {
			if b.LLM == nil {
				b.LLM = &explain.Usage{}
			}
			b.LLM.Add(*e.LLM)
		}
		for _, rc := range e.RuleErrors {
			i := slices.IndexFunc(b.RuleErrors, func(x RuleErrorCount) bool { return x.RuleID == rc.RuleID })
			if i < 0 {
				b.RuleErrors = append(b.RuleErrors, RuleErrorCount{RuleID: rc.RuleID, First: rc.First})
				i = len(b.RuleErrors) - 1
			}
			b.RuleErrors[i].Steps += rc.Steps
			b.RuleErrors[i].Traces++
		}
	}
	return b
}

// SummaryMarkdown renders summary.md: one table row per input.
func SummaryMarkdown(b *Batch) []byte {
	var s strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&s, format, args...) }
	w("# Batch audit summary\n\n")
	w("Policy %s (`%s`) · %d traces: %d audited, %d rejected · violations: %s · %s\n\n",
		mdText(b.PolicyID), ShortHash(b.PolicyHash), b.Traces, b.Audited, b.Rejected,
		SeverityLine(b.SeverityCounts), b.FinishedAt.Sub(b.StartedAt).Round(time.Millisecond))
	if len(b.RuleErrors) > 0 {
		w("## Rule errors\n\nThese rules could not be evaluated on some steps; the rest of each audit went on. %s\n\n", RuleErrorAdvice)
		w("| Rule | Steps | Traces | First error |\n|---|---|---|---|\n")
		for _, r := range b.RuleErrors {
			w("| `%s` | %d | %d | %s |\n", r.RuleID, r.Steps, r.Traces, mdText(ruleErrorText(r.First)))
		}
		w("\n")
	}
	if b.LLM != nil {
		w("LLM explanations: %s\n\n", UsageLine(b.LLM))
	}
	w("| Trace | Steps | Critical | High | Medium | Low | Risk | Result |\n|---|---|---|---|---|---|---|---|\n")
	for _, e := range b.Entries {
		if e.Status == StatusRejected {
			id := e.TraceID
			if id == "" {
				id = "—"
			}
			w("| %s | — | — | — | — | — | — | rejected (%s): %s |\n", mdText(id), mdText(e.Source), mdText(strings.Join(e.Problems, "; ")))
			continue
		}
		c := e.SeverityCounts
		w("| [%s](%s) | %d | %d | %d | %d | %d | %d | audited |\n", mdText(e.TraceID), linkPath(e.Report), e.Steps,
			c[policy.SeverityCritical], c[policy.SeverityHigh], c[policy.SeverityMedium], c[policy.SeverityLow], e.RiskScore)
	}
	w("\nEach audited trace has report.md and audit.json in its own folder; batch.json holds this table for machines.\n")
	return []byte(s.String())
}

// linkPath escapes each segment of a relative file path for a markdown
// link: folder names may hold %XX (report.FileName), which a link would
// otherwise decode.
func linkPath(p string) string {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		parts[i] = url.PathEscape(part)
	}
	return strings.Join(parts, "/")
}
