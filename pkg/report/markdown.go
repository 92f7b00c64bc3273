package report

import (
	"fmt"
	"strings"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
)

// Markdown renders one audit as a report a person reads top to bottom:
// verdict first, then violations, then each step with its explanation.
func Markdown(a *Audit) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	t := a.Trace
	w("# Audit report: %s\n\n", mdText(t.TraceID))
	w("| | |\n|---|---|\n")
	w("| Agent | %s |\n", mdText(t.AgentName))
	w("| Steps | %d |\n", len(t.Steps))
	w("| Policy | %s (`%s`) |\n", mdText(a.PolicyID), ShortHash(a.PolicyHash))
	w("| Risk score | **%d / 100** |\n", a.RiskScore)
	w("| Violations | %s |\n", SeverityLine(a.SeverityCounts))
	explanations := a.ExplanationSource
	if a.LLMUsage != nil {
		explanations += " (" + UsageLine(a.LLMUsage) + ")"
	}
	w("| Explanations | %s |\n", explanations)
	w("| Generated | %s |\n\n", a.GeneratedAt.UTC().Format("2006-01-02 15:04:05 MST"))

	if len(a.Warnings) > 0 {
		w("## Warnings\n\n")
		for _, warn := range a.Warnings {
			w("- %s\n", mdText(warn))
		}
		w("\n")
	}
	w("## Summary\n\n%s\n\n", mdText(a.Summary))

	w("## Violations\n\n")
	if len(a.Violations) == 0 {
		w("None: no rule of the policy fired on this trace.\n\n")
	} else {
		w("| Severity | Rule | Step | Weight | Description |\n|---|---|---|---|---|\n")
		for _, v := range a.Violations {
			w("| %s | `%s` | %d · `%s` | %d | %s |\n", v.Severity, v.RuleID, v.StepIndex, v.StepID, v.Weight, mdText(v.Description))
		}
		w("\n")
	}
	if len(a.RuleErrors) > 0 {
		w("## Rule errors\n\nThese conditions failed to evaluate; the rest of the audit went on. %s\n\n", RuleErrorAdvice)
		w("| Rule | Step | Error |\n|---|---|---|\n")
		for _, e := range a.RuleErrors {
			w("| `%s` | %d · `%s` | %s |\n", e.RuleID, e.StepIndex, e.StepID, mdText(ruleErrorText(e.Error)))
		}
		w("\n")
	}

	byStep := map[string][]policy.Violation{}
	for _, v := range a.Violations {
		byStep[v.StepID] = append(byStep[v.StepID], v)
	}
	w("## Steps\n\n")
	for i, s := range t.Steps {
		name := ""
		if s.Name != "" {
			name = " · " + mdText(s.Name)
		}
		w("### %d. `%s` · %s%s\n\n", i, s.StepID, s.Type, name)
		if s.Description != "" {
			w("%s\n\n", mdText(s.Description))
		}
		if e, ok := a.Explanations[s.StepID]; ok {
			w("- **Why:** %s\n", mdText(e.Why))
			if len(e.DataAccessed) > 0 {
				w("- **Data:** %s\n", code(e.DataAccessed))
			}
			if len(e.FedBy) > 0 {
				w("- **Fed by:** %s\n", code(e.FedBy))
			}
			for _, r := range e.Risks {
				w("- **Risk:** %s\n", mdText(r))
			}
			if e.Alternatives != "" {
				w("- **Alternatives:** %s\n", mdText(e.Alternatives))
			}
			if e.Confidence > 0 {
				w("- **Confidence:** %.0f%%\n", e.Confidence*100)
			}
		}
		for _, v := range byStep[s.StepID] {
			w("- ⚠ **%s** `%s`%s\n", strings.ToUpper(v.Severity), v.RuleID, colonThen(mdText(v.Description)))
		}
		w("\n")
	}

	var flows []execgraph.Edge
	for _, e := range a.Graph.Edges {
		if e.Kind == execgraph.KindDataFlow {
			flows = append(flows, e)
		}
	}
	w("## Data flow\n\n")
	if len(flows) == 0 {
		w("No step's input carried a value an earlier step produced.\n")
	} else {
		for _, e := range flows {
			w("- `%s` → `%s`: %s\n", e.From, e.To, mdText(e.Value))
		}
	}
	return []byte(b.String())
}

// UsageLine renders LLM usage: model, calls, cached steps, tokens, cost.
func UsageLine(u *explain.Usage) string {
	return fmt.Sprintf("%s: %d calls, %d cached steps, %d+%d tokens, $%.4f", u.Model, u.Calls, u.CachedSteps,
		u.PromptTokens, u.CompletionTokens, u.CostUSD)
}

// SeverityLine renders counts as "1 critical, 2 high" (or "none").
func SeverityLine(counts map[string]int) string {
	var parts []string
	for _, s := range policy.Severities {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ShortHash shortens "sha256:abcdef…" for display.
func ShortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

var mdEscaper = strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;")

// mdText keeps untrusted trace text from breaking tables or injecting HTML;
// other control characters (a NUL in a rejected id) are shown as U+FFFD.
func mdText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\r' || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, mdEscaper.Replace(s))
}

func code(items []string) string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = "`" + strings.ReplaceAll(s, "`", "'") + "`"
	}
	return strings.Join(out, ", ")
}

// ruleErrorText is a rule error's first line as a reader sees it: expr
// says "<nil>" for a missing value, which reads as nil (and is no HTML).
func ruleErrorText(err string) string { return strings.ReplaceAll(firstLine(err), "<nil>", "nil") }

// RuleErrorAdvice is what to do about rule errors, wherever they are
// reported: lint passed these rules, the data broke them.
const RuleErrorAdvice = "Lint cannot see these: they depend on the data. Guard the fields a rule reads " +
	"(`get(step, 'input.amount', 0) > 1000` rather than `step.input.amount > 1000`) and audit again."

// colonThen is ": s", or nothing when s is empty (no dangling colon).
func colonThen(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
