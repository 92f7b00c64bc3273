package replayui_test

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/assert"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/replayui"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

func viewer() *replayui.Model {
	a := &report.Audit{Trace: &trace.Trace{TraceID: "t1", AgentName: "bot", Steps: []*trace.Step{
		{StepID: "a", Type: "llm_call", Name: "plan"},
		{StepID: "b", Type: "tool_call", Name: "sql", Input: map[string]any{"query": "select * from users", "limit": 5}},
		{StepID: "c", Type: "decision"},
	}}}
	sides := []replayui.Side{
		{Name: "first", Violations: []policy.Violation{{RuleID: "raw-sql", StepID: "b", Severity: "medium", Description: "raw SQL"}}, Risk: 20},
		{Name: "second", Violations: []policy.Violation{{RuleID: "decided", StepID: "c", Severity: "low", Description: "a decision"}}, Risk: 5},
	}
	m := replayui.New(a, sides)
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	return m
}

func press(m *replayui.Model, keys ...string) string {
	for _, k := range keys {
		var msg tea.KeyPressMsg
		switch k {
		case "down":
			msg = tea.KeyPressMsg{Code: tea.KeyDown}
		case "enter":
			msg = tea.KeyPressMsg{Code: tea.KeyEnter}
		case "tab":
			msg = tea.KeyPressMsg{Code: tea.KeyTab}
		default:
			msg = tea.KeyPressMsg{Code: rune(k[0]), Text: k}
		}
		m.Update(msg)
	}
	return ansi.Strip(m.Render())
}

func TestViewerKeys(t *testing.T) {
	m := viewer()
	screen := press(m)
	assert.Contains(t, screen, "step 0 · a · llm_call plan")
	assert.Contains(t, screen, "first (risk 20, 1 violations)")

	screen = press(m, "n")
	assert.Contains(t, screen, "step 1 · b · tool_call sql", "n jumps to the violation")
	assert.Contains(t, screen, `input: {"limit":5,"query":"select * from users"}`)
	screen = press(m, "e")
	assert.Contains(t, screen, `"query": "select * from users"`, "e expands the JSON")

	screen = press(m, "n")
	assert.Contains(t, screen, "no further violation that way")

	screen = press(m, "tab")
	assert.Contains(t, screen, "- second drops raw-sql (medium)")
	screen = press(m, "n")
	assert.Contains(t, screen, "step 2 · c · decision", "under the second policy the decision is the violation")
	assert.Contains(t, screen, "+ second adds decided (low)")

	screen = press(m, "f", "t", "o", "o", "l", "_", "c", "a", "l", "l", "enter")
	assert.Contains(t, screen, "1 of 3 steps", "a filter by step type")
	screen = press(m, "/", "z", "z", "enter")
	assert.Contains(t, screen, "no step matches")
	assert.True(t, strings.Count(screen, "\n") <= 30, "the screen fits the terminal")
}

// Text from a trace cannot drive the terminal: escape sequences and other
// control characters are dropped before anything is drawn.
func TestViewerDropsControlCharacters(t *testing.T) {
	evil := "x\x1b]52;c;cHduZWQ=\x07\x1b[2J\u009b31m"
	a := &report.Audit{Trace: &trace.Trace{TraceID: evil, AgentName: evil, Steps: []*trace.Step{
		{StepID: "a", Type: "tool_call", Name: evil, Description: evil, Output: map[string]any{"o": evil}},
	}}}
	m := replayui.New(a, []replayui.Side{{Name: "p", Violations: []policy.Violation{{RuleID: "r", StepID: "a", Severity: "", Description: evil}}}})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	screen := m.Render()
	for _, bad := range []string{"\x1b]52", "\x1b[2J", "\u009b", "\x07"} {
		assert.NotContains(t, screen, bad)
	}
	assert.Contains(t, ansi.Strip(screen), "x]52;c;cHduZWQ=[2J31m", "the text stays, without its control characters")
}
