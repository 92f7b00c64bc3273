package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
)

// Report summary headers: what a batch table needs, readable without
// decoding the audit in the body.
const (
	HeaderTraceID    = "Troy-Trace-Id"
	HeaderSteps      = "Troy-Steps"
	HeaderRisk       = "Troy-Risk"
	HeaderSeverities = "Troy-Severities"  // critical=1,high=0,medium=2,low=0
	HeaderLLM        = "Troy-LLM"         // LLM usage as JSON, when an LLM explained the trace
	HeaderRuleErrors = "Troy-Rule-Errors" // per rule, steps and first error, as JSON, when some rule could not be evaluated
)

// Bounds on the rule-error header: a summary stays small.
const (
	maxRuleErrorRules = 20
	maxRuleErrorText  = 200
)

// Summary is the head of one report.
type Summary struct {
	TraceID        string
	Steps          int
	RiskScore      int
	SeverityCounts map[string]int
	LLM            *explain.Usage
	RuleErrors     []report.RuleErrorCount
}

// SummaryOf takes the summary of an audit.
func SummaryOf(a *report.Audit) Summary {
	rc := report.CountRuleErrors(a.RuleErrors)
	if len(rc) > maxRuleErrorRules {
		rc = rc[:maxRuleErrorRules]
	}
	for i := range rc {
		if r := []rune(rc[i].First); len(r) > maxRuleErrorText {
			rc[i].First = string(r[:maxRuleErrorText]) + "…"
		}
	}
	return Summary{TraceID: a.Trace.TraceID, Steps: len(a.Trace.Steps), RiskScore: a.RiskScore, SeverityCounts: a.SeverityCounts, LLM: a.LLMUsage,
		RuleErrors: rc}
}

// SetSummary writes the summary headers.
func SetSummary(h nats.Header, s Summary) {
	h.Set(HeaderTraceID, s.TraceID)
	h.Set(HeaderSteps, strconv.Itoa(s.Steps))
	h.Set(HeaderRisk, strconv.Itoa(s.RiskScore))
	parts := make([]string, len(policy.Severities))
	for i, sev := range policy.Severities {
		parts[i] = sev + "=" + strconv.Itoa(s.SeverityCounts[sev])
	}
	h.Set(HeaderSeverities, strings.Join(parts, ","))
	if s.LLM != nil {
		b, _ := json.Marshal(s.LLM)
		h.Set(HeaderLLM, string(b))
	}
	if len(s.RuleErrors) > 0 {
		b, _ := json.Marshal(s.RuleErrors)
		h.Set(HeaderRuleErrors, string(b))
	}
}

// GetSummary reads the summary headers.
func GetSummary(h nats.Header) (Summary, error) {
	// cloned: a header value pins its message's whole header block
	s := Summary{TraceID: strings.Clone(h.Get(HeaderTraceID)), SeverityCounts: make(map[string]int, len(policy.Severities))}
	var err1, err2 error
	s.Steps, err1 = strconv.Atoi(h.Get(HeaderSteps))
	s.RiskScore, err2 = strconv.Atoi(h.Get(HeaderRisk))
	if s.TraceID == "" || err1 != nil || err2 != nil {
		return s, fmt.Errorf("report without summary headers (%s, %s, %s)", HeaderTraceID, HeaderSteps, HeaderRisk)
	}
	for _, kv := range strings.Split(h.Get(HeaderSeverities), ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || policy.SeverityRank(k) == 0 {
			return s, fmt.Errorf("bad %s header %q", HeaderSeverities, h.Get(HeaderSeverities))
		}
		s.SeverityCounts[k] = n
	}
	if v := h.Get(HeaderLLM); v != "" {
		var u explain.Usage
		if err := json.Unmarshal([]byte(v), &u); err != nil {
			return s, fmt.Errorf("bad %s header: %w", HeaderLLM, err)
		}
		s.LLM = &u
	}
	if v := h.Get(HeaderRuleErrors); v != "" {
		if err := json.Unmarshal([]byte(v), &s.RuleErrors); err != nil {
			return s, fmt.Errorf("bad %s header: %w", HeaderRuleErrors, err)
		}
	}
	return s, nil
}
