// Package replayui is troy replay's terminal viewer: a trace's steps
// beside the selected step's detail, violations marked by severity, and
// up to three policies' verdicts on the same trace to switch between.
package replayui

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

// Side is one policy's verdict on the trace.
type Side struct {
	Name       string // "recorded", or the policy's id and short hash
	Violations []policy.Violation
	RuleErrors []policy.RuleError
	Risk       int
	Rules      map[string]string // rule id -> description
}

// Model is the viewer's state; bubbletea drives it.
type Model struct {
	audit   *report.Audit
	sides   []Side
	side    int
	cursor  int   // index into visible
	visible []int // step indexes shown (after filter and search)
	filter  string
	search  string
	prompt  string // "filter" or "search" while typing one
	input   string
	expand  bool
	scroll  int // detail pane offset
	width   int
	height  int
	status  string
}

// New makes a viewer of an audit's trace (and explanations) under sides,
// the first being the one the others are compared with.
func New(a *report.Audit, sides []Side) *Model {
	a, sides = sanitized(a, sides)
	m := &Model{audit: a, sides: sides, width: 100, height: 30}
	m.refilter()
	return m
}

// Init starts nothing: the viewer waits for keys.
func (m *Model) Init() tea.Cmd { return nil }

// Update handles a key or a resize.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyPressMsg:
		if m.prompt != "" {
			return m, m.typing(msg)
		}
		m.status = ""
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "down", "j":
			m.move(1)
		case "up", "k":
			m.move(-1)
		case "home", "g":
			m.cursor, m.scroll = 0, 0
		case "end", "G":
			m.cursor, m.scroll = max(len(m.visible)-1, 0), 0
		case "n":
			m.jump(1)
		case "N", "p":
			m.jump(-1)
		case "tab":
			if len(m.sides) > 1 {
				m.side = (m.side + 1) % len(m.sides)
				m.status = "policy: " + m.sides[m.side].Name
			}
		case "e", "enter":
			m.expand = !m.expand
		case "pgdown", "space":
			m.scroll += max(m.height-8, 1)
		case "pgup":
			m.scroll = max(m.scroll-max(m.height-8, 1), 0)
		case "/":
			m.prompt, m.input = "search", m.search
		case "f":
			m.prompt, m.input = "filter", m.filter
		}
	}
	return m, nil
}

// typing edits the filter or search being typed.
func (m *Model) typing(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "enter":
		if m.prompt == "search" {
			m.search = m.input
		} else {
			m.filter = m.input
		}
		m.prompt = ""
		m.refilter()
	case "esc":
		m.prompt = ""
	case "ctrl+c":
		return tea.Quit
	case "backspace":
		if r := []rune(m.input); len(r) > 0 {
			m.input = string(r[:len(r)-1])
		}
	default:
		if k.Text != "" {
			m.input += k.Text
		}
	}
	return nil
}

func (m *Model) move(d int) {
	m.cursor = min(max(m.cursor+d, 0), max(len(m.visible)-1, 0))
	m.scroll = 0
}

// jump moves to the next (d=1) or previous (d=-1) visible step with a
// violation under the current policy.
func (m *Model) jump(d int) {
	for i := m.cursor + d; i >= 0 && i < len(m.visible); i += d {
		if len(m.violationsAt(m.side, m.stepID(m.visible[i]))) > 0 {
			m.cursor, m.scroll = i, 0
			return
		}
	}
	m.status = "no further violation that way"
}

func (m *Model) stepID(i int) string { return m.audit.Trace.Steps[i].StepID }

func (m *Model) violationsAt(side int, stepID string) []policy.Violation {
	var out []policy.Violation
	for _, v := range m.sides[side].Violations {
		if v.StepID == stepID {
			out = append(out, v)
		}
	}
	return out
}

// refilter keeps the steps that match the filter (a rule id that fired on
// them under any policy, or a step type) and the search text.
func (m *Model) refilter() {
	m.visible = m.visible[:0]
	f, q := strings.ToLower(strings.TrimSpace(m.filter)), strings.ToLower(strings.TrimSpace(m.search))
	for i, s := range m.audit.Trace.Steps {
		if f != "" && strings.ToLower(s.Type) != f && !m.firedAnywhere(s.StepID, f) {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(stepText(s.StepID, s.Type, s.Name, s.Description, s.Input, s.Output, s.Metadata)), q) {
			continue
		}
		m.visible = append(m.visible, i)
	}
	m.cursor, m.scroll = 0, 0
	if len(m.visible) == 0 {
		m.status = "no step matches"
	}
}

func (m *Model) firedAnywhere(stepID, rule string) bool {
	for side := range m.sides {
		if slices.ContainsFunc(m.violationsAt(side, stepID), func(v policy.Violation) bool { return strings.ToLower(v.RuleID) == rule }) {
			return true
		}
	}
	return false
}

func stepText(parts ...any) string {
	var b strings.Builder
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			b.WriteString(p)
		case nil:
		default:
			j, _ := json.Marshal(p)
			b.Write(j)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

var (
	sevStyle = map[string]lipgloss.Style{
		"critical": lipgloss.NewStyle().Foreground(lipgloss.Color("#ffffff")).Background(lipgloss.Color("#b91c1c")).Bold(true),
		"high":     lipgloss.NewStyle().Foreground(lipgloss.Color("#ffffff")).Background(lipgloss.Color("#ea580c")).Bold(true),
		"medium":   lipgloss.NewStyle().Foreground(lipgloss.Color("#000000")).Background(lipgloss.Color("#facc15")).Bold(true),
		"low":      lipgloss.NewStyle().Foreground(lipgloss.Color("#ffffff")).Background(lipgloss.Color("#2563eb")).Bold(true),
	}
	dim      = lipgloss.NewStyle().Faint(true)
	bold     = lipgloss.NewStyle().Bold(true)
	selected = lipgloss.NewStyle().Reverse(true)
	pane     = lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)
)

// View draws the header, the step list beside the detail, and the keys.
func (m *Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	return v
}

// Render is the screen as text (View's content).
func (m *Model) Render() string {
	t := m.audit.Trace
	header := bold.Render(fmt.Sprintf("trace %s · agent %s · %d steps", t.TraceID, t.AgentName, len(t.Steps)))
	var names []string
	for i, s := range m.sides {
		n := fmt.Sprintf("%s (risk %d, %d violations)", s.Name, s.Risk, len(s.Violations))
		if i == m.side {
			n = selected.Render(n)
		} else {
			n = dim.Render(n)
		}
		names = append(names, n)
	}
	policies := "policy: " + strings.Join(names, dim.Render(" · "))
	if len(m.sides) > 1 {
		policies += dim.Render("  (tab switches; ± marks what it adds or drops against the first)")
	}
	bodyH := max(m.height-4, 5)
	listW := min(max(m.width/3, 28), 48)
	detailW := max(m.width-listW-4, 20)
	list := pane.Width(listW).Height(bodyH).MaxHeight(bodyH).Render(m.renderList(listW-4, bodyH-2))
	detail := pane.Width(detailW).Height(bodyH).MaxHeight(bodyH).Render(m.renderDetail(detailW-4, bodyH-2))
	keys := dim.Render("↑↓ move · n/N next/prev violation · tab policy · / search · f filter (rule or type) · e expand JSON · q quit")
	switch {
	case m.prompt != "":
		keys = bold.Render(m.prompt+": ") + m.input + "█" + dim.Render("  (enter apply · esc cancel)")
	case m.status != "":
		keys = bold.Render(m.status) + "  " + keys
	}
	if m.filter != "" || m.search != "" {
		header += dim.Render(fmt.Sprintf("  filter %q search %q: %d of %d steps", m.filter, m.search, len(m.visible), len(t.Steps)))
	}
	header = ansi.Truncate(header, m.width, "…")
	return lipgloss.JoinVertical(lipgloss.Left, header, ansi.Truncate(policies, m.width, "…"), lipgloss.JoinHorizontal(lipgloss.Top, list, detail),
		ansi.Truncate(keys, m.width, "…"))
}

func (m *Model) renderList(w, h int) string {
	first := max(m.cursor-h+1, 0)
	var lines []string
	for row := first; row < len(m.visible) && len(lines) < h; row++ {
		i := m.visible[row]
		s := m.audit.Trace.Steps[i]
		mark := "  "
		if vs := m.violationsAt(m.side, s.StepID); len(vs) > 0 {
			worst := vs[0].Severity
			for _, v := range vs {
				if policy.SeverityRank(v.Severity) > policy.SeverityRank(worst) {
					worst = v.Severity
				}
			}
			mark = sevStyle[worst].Render(strings.ToUpper(worst[:1])) + " "
		}
		if m.side > 0 && m.changed(s.StepID) {
			mark += "±"
		} else {
			mark += " "
		}
		text := truncate(fmt.Sprintf("%2d %s %s %s", i, s.StepID, s.Type, s.Name), w-5)
		if row == m.cursor {
			text = selected.Render("›" + text)
		} else {
			text = " " + text
		}
		lines = append(lines, mark+text)
	}
	return strings.Join(lines, "\n")
}

// changed reports whether this side's violations on a step differ from
// the first side's.
func (m *Model) changed(stepID string) bool {
	added, dropped := m.delta(stepID)
	return len(added)+len(dropped) > 0
}

// delta is what the current side adds and drops on a step against the
// first side.
func (m *Model) delta(stepID string) (added, dropped []policy.Violation) {
	base, cur := m.violationsAt(0, stepID), m.violationsAt(m.side, stepID)
	has := func(vs []policy.Violation, rule string) bool {
		return slices.ContainsFunc(vs, func(v policy.Violation) bool { return v.RuleID == rule })
	}
	for _, v := range cur {
		if !has(base, v.RuleID) {
			added = append(added, v)
		}
	}
	for _, v := range base {
		if !has(cur, v.RuleID) {
			dropped = append(dropped, v)
		}
	}
	return added, dropped
}

func (m *Model) renderDetail(w, h int) string {
	if len(m.visible) == 0 {
		return "no step matches the filter and search (f and / to change them)"
	}
	i := m.visible[m.cursor]
	s := m.audit.Trace.Steps[i]
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("%s", bold.Render(fmt.Sprintf("step %d · %s · %s %s", i, s.StepID, s.Type, s.Name)))
	if s.Description != "" {
		line("%s", s.Description)
	}
	if s.Timestamp != "" {
		line("%s", dim.Render("at "+s.Timestamp))
	}
	for _, v := range m.violationsAt(m.side, s.StepID) {
		line("%s %s: %s", sevStyle[v.Severity].Render(" "+strings.ToUpper(v.Severity)+" "), bold.Render(v.RuleID), v.Description)
		if d := m.sides[m.side].Rules[v.RuleID]; d != "" && d != v.Description {
			line("  %s", dim.Render(d))
		}
	}
	if m.side > 0 {
		added, dropped := m.delta(s.StepID)
		for _, v := range added {
			line("+ %s adds %s (%s)", m.sides[m.side].Name, v.RuleID, v.Severity)
		}
		for _, v := range dropped {
			line("- %s drops %s (%s)", m.sides[m.side].Name, v.RuleID, v.Severity)
		}
	}
	for _, e := range m.sides[m.side].RuleErrors {
		if e.StepID == s.StepID {
			line("rule %s could not be evaluated here: %s", e.RuleID, e.Error)
		}
	}
	if e, ok := m.audit.Explanations[s.StepID]; ok {
		line("")
		line("%s %s", bold.Render("why:"), e.Why)
		if len(e.DataAccessed) > 0 {
			line("%s %s", bold.Render("data:"), strings.Join(e.DataAccessed, ", "))
		}
		if len(e.FedBy) > 0 {
			line("%s %s", bold.Render("fed by:"), strings.Join(e.FedBy, ", "))
		}
		for _, r := range e.Risks {
			line("%s %s", bold.Render("risk:"), r)
		}
		if e.Alternatives != "" {
			line("%s %s", bold.Render("alternatives:"), e.Alternatives)
		}
		if e.Confidence > 0 {
			line("%s %.0f%%", bold.Render("confidence:"), e.Confidence*100)
		}
	}
	for _, part := range []struct {
		name string
		v    any
	}{{"input", s.Input}, {"output", s.Output}, {"metadata", s.Metadata}} {
		if part.v == nil {
			continue
		}
		if mv, ok := part.v.(map[string]any); ok && len(mv) == 0 {
			continue
		}
		line("")
		var j []byte
		if m.expand {
			j, _ = json.MarshalIndent(part.v, "", "  ")
		} else {
			j, _ = json.Marshal(part.v)
		}
		text := strings.Split(string(j), "\n")
		for k := range text {
			text[k] = clean(text[k])
		}
		line("%s %s", bold.Render(part.name+":"), strings.Join(text, "\n"))
	}
	// wrap to the pane, then show the part scrolled to
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		lines = append(lines, wrap(l, w)...)
	}
	m.scroll = min(m.scroll, max(len(lines)-h, 0))
	lines = lines[m.scroll:]
	if len(lines) > h {
		lines = append(lines[:h-1], dim.Render(fmt.Sprintf("… %d more lines (space / pgdown)", len(lines)-h+1)))
	}
	return strings.Join(lines, "\n")
}

// clean drops the control characters of text that came from a trace (or
// an LLM's explanation of it): an escape sequence written to the terminal
// could redraw the screen, retitle it, or reach the clipboard.
func clean(s string) string { return report.TerminalSafe(s, false) }

func cleanAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = clean(s)
	}
	return out
}

// sanitized copies what the viewer prints with every string cleaned.
func sanitized(a *report.Audit, sides []Side) (*report.Audit, []Side) {
	cp := *a
	t := *a.Trace
	t.TraceID, t.AgentName = clean(t.TraceID), clean(t.AgentName)
	t.Steps = make([]*trace.Step, len(a.Trace.Steps))
	for i, st := range a.Trace.Steps {
		c := *st
		c.StepID, c.Type, c.Name, c.Description, c.Timestamp = clean(c.StepID), clean(c.Type), clean(c.Name), clean(c.Description), clean(c.Timestamp)
		t.Steps[i] = &c
	}
	cp.Trace = &t
	cp.Explanations = make(map[string]explain.Step, len(a.Explanations))
	for id, e := range a.Explanations {
		e.Why, e.Alternatives = clean(e.Why), clean(e.Alternatives)
		e.DataAccessed, e.FedBy, e.Risks = cleanAll(e.DataAccessed), cleanAll(e.FedBy), cleanAll(e.Risks)
		cp.Explanations[clean(id)] = e
	}
	out := make([]Side, len(sides))
	for i, sd := range sides {
		c := sd
		c.Name = clean(sd.Name)
		c.Violations = make([]policy.Violation, len(sd.Violations))
		for j, v := range sd.Violations {
			v.RuleID, v.StepID, v.Description = clean(v.RuleID), clean(v.StepID), clean(v.Description)
			if policy.SeverityRank(v.Severity) == 0 {
				v.Severity = "low" // an unknown severity still shows, as the lowest
			}
			c.Violations[j] = v
		}
		c.RuleErrors = make([]policy.RuleError, len(sd.RuleErrors))
		for j, e := range sd.RuleErrors {
			e.RuleID, e.StepID, e.Error = clean(e.RuleID), clean(e.StepID), clean(e.Error)
			c.RuleErrors[j] = e
		}
		c.Rules = make(map[string]string, len(sd.Rules))
		for k, d := range sd.Rules {
			c.Rules[clean(k)] = clean(d)
		}
		out[i] = c
	}
	return &cp, out
}

func truncate(s string, w int) string {
	r := []rune(s)
	if w <= 1 || len(r) <= w {
		return s
	}
	return string(r[:w-1]) + "…"
}

// wrap cuts a line, styled or not, into lines of at most w cells.
func wrap(s string, w int) []string {
	if w <= 0 {
		return []string{s}
	}
	return strings.Split(ansi.Wrap(s, w, " ,"), "\n")
}
