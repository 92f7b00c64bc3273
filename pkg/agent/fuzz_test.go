package agent_test

import (
	"strings"
	"testing"

	"github.com/troy-audit/troy/pkg/agent"
)

// FuzzParseContracts: any model output is either a plan (or evaluation)
// that satisfies its contract, or a violation with a reason; never a panic.
func FuzzParseContracts(f *testing.F) {
	f.Add(P("s1", "file_system").Text)
	f.Add(E("success", "wrote 2 characters", "complete", "s1").Text)
	f.Add("<plan>{}</plan><plan>{\"steps\": null}</plan>")
	f.Add("<evaluation>{\"outcome\": \"success\", \"evidence\": 3}</evaluation>")
	f.Fuzz(func(t *testing.T, text string) {
		known := func(s string) bool { return s == "file_system" || s == "submit" }
		p, err := agent.ParsePlan(text, known, []string{"file_system", "submit"})
		if err == nil {
			if len(p.Steps) == 0 || !known(p.NextAction.Tool) || strings.TrimSpace(p.NextAction.Rationale) == "" {
				t.Fatalf("accepted a plan that breaks the contract: %+v", p)
			}
		} else if err.Error() == "" {
			t.Fatal("a violation without a reason")
		}
		e, err := agent.ParseEvaluation(text, p)
		if err == nil && len(strings.TrimSpace(e.Evidence)) < agent.MinEvidence {
			t.Fatalf("accepted short evidence %q", e.Evidence)
		}
	})
}
