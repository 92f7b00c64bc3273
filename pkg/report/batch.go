package report

import (
	"fmt"
	"net/url"
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
	Entries        []Entry        `json:"entries"`
	StartedAt      time.Time      `json:"started_at"`
	FinishedAt     time.Time      `json:"finished_at"`
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
