package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/troy-audit/troy/pkg/policy"
)

// Diff compares two evaluations of one trace by (rule, step).
type Diff struct {
	Added   []policy.Violation `json:"added"`
	Removed []policy.Violation `json:"removed"`
	Kept    []policy.Violation `json:"kept"`
}

// Compare returns the violations only in after, only in before, and in both.
func Compare(before, after []policy.Violation) Diff {
	key := func(v policy.Violation) string { return v.RuleID + "\x00" + v.StepID }
	old := map[string]bool{}
	for _, v := range before {
		old[key(v)] = true
	}
	d := Diff{Added: []policy.Violation{}, Removed: []policy.Violation{}, Kept: []policy.Violation{}}
	now := map[string]bool{}
	for _, v := range after {
		now[key(v)] = true
		if old[key(v)] {
			d.Kept = append(d.Kept, v)
		} else {
			d.Added = append(d.Added, v)
		}
	}
	for _, v := range before {
		if !now[key(v)] {
			d.Removed = append(d.Removed, v)
		}
	}
	return d
}

// Replay writes an audit step by step: each step with its explanation and the
// violations on it. With diff, steps show which violations are new (+) and
// which are gone (-) under the other policy.
func Replay(w io.Writer, a *Audit, diff *Diff) {
	w = terminalWriter{w} // trace text reaches a terminal: no escape sequences
	fmt.Fprintf(w, "trace %s · agent %s · policy %s (%s) · risk %d/100 · %s\n",
		a.Trace.TraceID, a.Trace.AgentName, a.PolicyID, ShortHash(a.PolicyHash), a.RiskScore, SeverityLine(a.SeverityCounts))
	if a.Summary != "" {
		fmt.Fprintf(w, "%s\n", a.Summary)
	}
	fmt.Fprintln(w)
	marks := map[string][]string{}
	add := func(prefix string, vs []policy.Violation) {
		for _, v := range vs {
			marks[v.StepID] = append(marks[v.StepID], fmt.Sprintf("%s %s %s", prefix, strings.ToUpper(v.Severity), v.RuleID)+colonThen(v.Description))
		}
	}
	if diff == nil {
		add("  ⚠", a.Violations)
	} else {
		add("  ⚠", diff.Kept)
		add("  + NEW", diff.Added)
		add("  - GONE", diff.Removed)
	}
	for i, s := range a.Trace.Steps {
		name := ""
		if s.Name != "" {
			name = " " + s.Name
		}
		desc := ""
		if s.Description != "" {
			desc = " — " + s.Description
		}
		fmt.Fprintf(w, "%3d  %s  %s%s%s\n", i, s.StepID, s.Type, name, desc)
		for _, part := range []struct {
			name string
			v    any
		}{{"input", s.Input}, {"output", s.Output}} {
			if part.v != nil {
				b, _ := json.Marshal(part.v)
				fmt.Fprintf(w, "       %s: %s\n", part.name, truncateText(string(b), 400))
			}
		}
		if e, ok := a.Explanations[s.StepID]; ok {
			fmt.Fprintf(w, "       why: %s\n", e.Why)
			if len(e.FedBy) > 0 {
				fmt.Fprintf(w, "       fed by: %s\n", strings.Join(e.FedBy, ", "))
			}
			for _, r := range e.Risks {
				fmt.Fprintf(w, "       risk: %s\n", r)
			}
		}
		for _, m := range marks[s.StepID] {
			fmt.Fprintf(w, "     %s\n", m)
		}
	}
	if diff != nil {
		fmt.Fprintf(w, "\n%d new, %d gone, %d unchanged\n", len(diff.Added), len(diff.Removed), len(diff.Kept))
	}
}

// truncateText shortens a long value for one line of a terminal.
func truncateText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + fmt.Sprintf("… (%d more characters)", len(r)-n)
}

// TerminalSafe drops the control characters of text that came from a
// trace (or an LLM's explanation of it): an escape sequence written to a
// terminal could redraw the screen, retitle it, or reach the clipboard.
// Line breaks and tabs stay when keepLines, else they become spaces.
func TerminalSafe(s string, keepLines bool) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			if keepLines && r != '\r' {
				return r
			}
			return ' '
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return -1
		}
		return r
	}, s)
}

type terminalWriter struct{ w io.Writer }

func (t terminalWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, TerminalSafe(string(p), true)); err != nil {
		return 0, err
	}
	return len(p), nil
}
