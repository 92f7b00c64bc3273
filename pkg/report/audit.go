// Package report holds the audit record (audit.json) and renders it, and
// batch summaries, for people and machines.
package report

import (
	"time"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// SchemaVersion of audit.json; bump on incompatible change.
const SchemaVersion = "1"

// Audit is one trace audited against one policy: everything needed to replay it.
type Audit struct {
	SchemaVersion     string                  `json:"schema_version"`
	Trace             *trace.Trace            `json:"trace"`
	PolicyID          string                  `json:"policy_id"`
	PolicyHash        string                  `json:"policy_hash"`
	Graph             execgraph.Graph         `json:"graph"`
	ExplanationSource string                  `json:"explanation_source"`
	Summary           string                  `json:"summary"`
	Explanations      map[string]explain.Step `json:"explanations"`
	Violations        []policy.Violation      `json:"violations"`
	RuleErrors        []policy.RuleError      `json:"rule_errors"`
	RiskScore         int                     `json:"risk_score" jsonschema:"minimum=0,maximum=100"`
	SeverityCounts    map[string]int          `json:"severity_counts"`
	LLMUsage          *explain.Usage          `json:"llm_usage,omitempty"` // calls, tokens and cost of LLM explanations
	Warnings          []string                `json:"warnings,omitempty"`  // e.g. explanations that fell back to the heuristic
	GeneratedAt       time.Time               `json:"generated_at"`
}
