// Package explain says, for every step of a trace, why it happened, what data
// it touched and what risks it carries. This file holds the shared types and
// the offline heuristic explainer; an LLM explainer fills the same types.
package explain

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// SourceHeuristic marks explanations made without an LLM.
const SourceHeuristic = "heuristic"

// Step explains one step.
type Step struct {
	StepID       string   `json:"step_id"`
	Source       string   `json:"source"`
	Why          string   `json:"why"`
	DataAccessed []string `json:"data_accessed"`
	FedBy        []string `json:"fed_by"`
	Alternatives string   `json:"alternatives,omitempty"`
	Risks        []string `json:"risks"`
	Confidence   float64  `json:"confidence,omitempty"`
}

// Trace explains a whole trace: every step by id, and a summary.
type Trace struct {
	Source   string          `json:"source"` // heuristic, llm, or mixed
	Summary  string          `json:"summary"`
	Steps    map[string]Step `json:"steps"`
	Usage    *Usage          `json:"usage,omitempty"`    // LLM calls, tokens, cost
	Warnings []string        `json:"warnings,omitempty"` // e.g. steps that fell back to the heuristic
	// Responses are the model's raw answers by file name (step_<id>.txt,
	// trace_summary.txt), kept for the audit trail.
	Responses map[string]string `json:"responses,omitempty"`
}

var (
	sqlPattern       = mustMatcher(`\b(select\s.+\sfrom|insert\s+into|update\s+\w+\s+set|delete\s+from|drop\s+(table|database)|union\s+select)\b`)
	injectionPattern = mustMatcher(`ignore (all )?(previous|prior) instructions|disregard (the|all|your) (previous|prior|above)|you are now|system update|run as admin|do not tell the user`)
	sensitiveClasses = map[string]bool{"pii": true, "phi": true, "pci": true, "secret": true, "confidential": true, "sensitive": true, "credentials": true}
)

const maxDataAccessed = 12

// Heuristic explains a trace from its metadata, data and execution graph alone.
func Heuristic(t *trace.Trace, g execgraph.Graph) Trace {
	fedBy := g.FedBy()
	out := Trace{Source: SourceHeuristic, Steps: make(map[string]Step, len(t.Steps))}
	sensitive := map[string]string{} // step id -> its data classification
	agentAdmin := strings.EqualFold(str(t.Metadata, "permission_level"), "admin")
	risky := 0
	for _, s := range t.Steps {
		class := strings.ToLower(str(s.Metadata, "data_classification"))
		if sensitiveClasses[class] {
			sensitive[s.StepID] = class
		}
		e := Step{
			StepID:       s.StepID,
			Source:       SourceHeuristic,
			Why:          why(s),
			DataAccessed: dataAccessed(s),
			FedBy:        nonNil(fedBy[s.StepID]),
			Risks:        []string{},
		}
		if sensitiveClasses[class] {
			e.Risks = append(e.Risks, fmt.Sprintf("handles %s data", class))
		}
		external := strings.EqualFold(str(s.Metadata, "network_zone"), "external")
		if external {
			e.Risks = append(e.Risks, "reaches a network outside the organisation")
		}
		for _, from := range e.FedBy {
			if c, ok := sensitive[from]; ok && (external || s.Type == trace.TypeToolCall) {
				e.Risks = append(e.Risks, fmt.Sprintf("receives %s data from step %s", c, from))
			}
		}
		if strings.EqualFold(str(s.Metadata, "permission_level"), "admin") && !agentAdmin {
			e.Risks = append(e.Risks, "runs with admin permission the agent does not hold")
		}
		if b, _ := s.Metadata["requires_approval"].(bool); b && s.Metadata["approval_token"] == nil {
			e.Risks = append(e.Risks, "requires approval but carries no approval token")
		}
		in := policy.Text(s.Input)
		if s.Type == trace.TypeToolCall && sqlPattern.Match(in) {
			e.Risks = append(e.Risks, "runs raw SQL")
		}
		if injectionPattern.Match(in) || injectionPattern.Match(policy.Text(s.Output)) {
			e.Risks = append(e.Risks, "contains text that reads like a prompt injection")
		}
		if len(e.Risks) > 0 {
			risky++
		}
		out.Steps[s.StepID] = e
	}
	out.Summary = summary(t, g, risky)
	return out
}

func why(s *trace.Step) string {
	desc := strings.TrimSpace(s.Description)
	var act string
	switch s.Type {
	case trace.TypeToolCall:
		act = "called a tool"
		if s.Name != "" {
			act = "called the tool " + s.Name
		}
	case trace.TypeLLMCall:
		act = "asked a model"
		if s.Name != "" {
			act = "asked the model " + s.Name
		}
	case trace.TypeDecision:
		act = "made a decision"
	case trace.TypeObservation:
		act = "observed a result"
	}
	if desc == "" {
		return "The agent " + act + "."
	}
	// the description, whatever its grammar ("fetch the customer",
	// "permission denied, so retry with sudo"), after a colon: "to …"
	// read as nonsense for anything but a purpose
	return fmt.Sprintf("The agent %s: %s.", act, strings.TrimSuffix(lowerFirst(desc), "."))
}

// plural is "1 step", "2 steps".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// dataAccessed names the fields a step read and wrote, e.g. input.query.
func dataAccessed(s *trace.Step) []string {
	out := []string{}
	for _, side := range []struct {
		name string
		v    any
	}{{"input", s.Input}, {"output", s.Output}} {
		m, ok := side.v.(map[string]any)
		if !ok {
			if side.v != nil {
				out = append(out, side.name)
			}
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if len(out) == maxDataAccessed {
				return out
			}
			out = append(out, side.name+"."+k)
		}
	}
	return out
}

func summary(t *trace.Trace, g execgraph.Graph, risky int) string {
	counts := map[string]int{}
	var tools []string
	for _, s := range t.Steps {
		counts[s.Type]++
		if s.Type == trace.TypeToolCall && s.Name != "" && !slices.Contains(tools, s.Name) {
			tools = append(tools, s.Name)
		}
	}
	var parts []string
	for _, typ := range trace.StepTypes {
		if n := counts[typ]; n > 0 {
			parts = append(parts, plural(n, strings.ReplaceAll(typ, "_", " ")))
		}
	}
	flows := 0
	for _, e := range g.Edges {
		if e.Kind == execgraph.KindDataFlow {
			flows++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s ran %s (%s)", t.AgentName, plural(len(t.Steps), "step"), strings.Join(parts, ", "))
	if len(tools) > 0 {
		fmt.Fprintf(&b, " using %s", strings.Join(tools, ", "))
	}
	switch flows {
	case 0:
		b.WriteString("; no data flowed between steps")
	case 1:
		b.WriteString("; data flowed between steps once")
	default:
		fmt.Fprintf(&b, "; data flowed between steps %d times", flows)
	}
	carry := "carry"
	if len(t.Steps) == 1 {
		carry = "carries"
	}
	fmt.Fprintf(&b, "; %d of %s %s a risk.", risky, plural(len(t.Steps), "step"), carry)
	return b.String()
}

// mustMatcher compiles a pattern of this package; they are constants, so a
// failure is a programming error caught by the tests.
func mustMatcher(p string) *policy.Matcher {
	m, err := policy.NewMatcher(p)
	if err != nil {
		panic(err)
	}
	return m
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	if len(r) > 1 && r[1] >= 'A' && r[1] <= 'Z' { // an acronym: keep it
		return s
	}
	return strings.ToLower(string(r[0])) + string(r[1:])
}
