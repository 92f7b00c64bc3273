package score

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troy-audit/troy/pkg/policy"
)

func TestCompute(t *testing.T) {
	s := Compute([]policy.Violation{
		{RuleID: "a", Severity: "high", Weight: 30},
		{RuleID: "a", Severity: "high", Weight: 30}, // same rule on another step counts once
		{RuleID: "b", Severity: "low", Weight: 5},
	})
	assert.Equal(t, 35, s.RiskScore)
	assert.Equal(t, map[string]int{"critical": 0, "high": 2, "medium": 0, "low": 1}, s.SeverityCounts)
	assert.True(t, s.AtOrAbove("high"))
	assert.False(t, s.AtOrAbove("critical"))

	capped := Compute([]policy.Violation{{RuleID: "a", Weight: 80, Severity: "low"}, {RuleID: "b", Weight: 80, Severity: "low"}})
	assert.Equal(t, 100, capped.RiskScore)
	assert.Equal(t, 0, Compute(nil).RiskScore)
}
