package events_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/events"
)

// The summary headers come from another stage: whatever they hold, reading
// them returns a summary or an error, never a panic, and a summary it
// returns has a trace id.
func FuzzGetSummary(f *testing.F) {
	f.Add("t-1", "5", "70", "critical=1,high=0,medium=0,low=0", `[{"rule_id":"r","steps":2,"first_error":"x"}]`)
	f.Add("t-1", "5", "70", "critical=1", `not json`)
	f.Add("", "x", "", "", "")
	f.Fuzz(func(t *testing.T, id, steps, risk, sev, ruleErrors string) {
		h := nats.Header{}
		h.Set(events.HeaderTraceID, id)
		h.Set(events.HeaderSteps, steps)
		h.Set(events.HeaderRisk, risk)
		h.Set(events.HeaderSeverities, sev)
		h.Set(events.HeaderRuleErrors, ruleErrors)
		s, err := events.GetSummary(h)
		if err == nil && s.TraceID == "" {
			t.Fatal("a summary without a trace id")
		}
	})
}
