// Package score turns a trace's violations into a 0–100 risk score.
package score

import "github.com/troy-audit/troy/pkg/policy"

// Max is the highest risk score.
const Max = 100

// Score is the risk of one trace.
type Score struct {
	RiskScore      int            `json:"risk_score"`
	SeverityCounts map[string]int `json:"severity_counts"`
}

// Compute sums the weights of the distinct rules violated, capped at Max, and
// counts violations by severity (every severity present, zero or not).
func Compute(vs []policy.Violation) Score {
	s := Score{SeverityCounts: make(map[string]int, len(policy.Severities))}
	for _, sev := range policy.Severities {
		s.SeverityCounts[sev] = 0
	}
	seen := map[string]bool{}
	for _, v := range vs {
		s.SeverityCounts[v.Severity]++
		if !seen[v.RuleID] {
			seen[v.RuleID] = true
			s.RiskScore += v.Weight
		}
	}
	s.RiskScore = min(s.RiskScore, Max)
	return s
}

// AtOrAbove reports whether any violation is at or above a severity.
func (s Score) AtOrAbove(severity string) bool {
	floor := policy.SeverityRank(severity)
	for sev, n := range s.SeverityCounts {
		if n > 0 && policy.SeverityRank(sev) >= floor {
			return true
		}
	}
	return false
}
