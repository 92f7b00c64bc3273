package report

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// HTMLFile is the HTML report beside report.md.
const HTMLFile = "report.html"

//go:embed html/*.tmpl
var htmlFS embed.FS

var htmlTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"upper":     strings.ToUpper,
	"json":      prettyJSON,
	"pct":       func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	"sevColor":  func(s string) template.CSS { return template.CSS(severityColor[s]) },
	"stepColor": func(s htmlStep) template.CSS { return template.CSS(s.Color) },
	"delta":     func(a, b float64) float64 { return a - b },
}).ParseFS(htmlFS, "html/*.tmpl"))

// severityColor is the colour of a step by its worst violation.
var severityColor = map[string]string{"critical": "#b91c1c", "high": "#ea580c", "medium": "#ca8a04", "low": "#2563eb", "": "#64748b"}

func prettyJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

type htmlStep struct {
	Index int
	*trace.Step
	Severity    string // worst violation on it, "" for none
	Color       string
	Violations  []policy.Violation
	Explanation *explain.Step
}

type svgNode struct {
	X, Y, W, H int
	Color      string
	Label      string
	Title      string
	Href       string
}

type svgEdge struct {
	Path  string
	Class string
	Title string
}

type svgGraph struct {
	Width, Height int
	Nodes         []svgNode
	Edges         []svgEdge
	Caption       string // the timeline's span, when its steps are placed by time
}

// htmlViolation is a violation with the step it names (Found false when
// the trace has no such step: shown as named, linked nowhere).
type htmlViolation struct {
	policy.Violation
	Found bool
	Index int
	Step  *htmlStep
}

type htmlAudit struct {
	*Audit
	Rows      []htmlViolation
	Steps     []htmlStep
	StepByID  map[string]int
	Graph     svgGraph
	Timeline  svgGraph
	Severity  []sevCount
	Generated string
}

type sevCount struct {
	Severity string
	Count    int
	Color    string
}

// HTML renders one audit as a self-contained page: the summary, the
// execution graph and a timeline as inline SVG (steps coloured by their
// worst violation), each violation with its step and explanation, and
// every step. Nothing is loaded from elsewhere.
func HTML(a *Audit) ([]byte, error) {
	if a.Trace == nil {
		return nil, fmt.Errorf("html: the audit has no trace")
	}
	v := htmlAudit{Audit: a, StepByID: map[string]int{}, Generated: a.GeneratedAt.UTC().Format("2006-01-02 15:04:05 MST")}
	byStep := map[string][]policy.Violation{}
	for _, x := range a.Violations {
		byStep[x.StepID] = append(byStep[x.StepID], x)
	}
	for i, s := range a.Trace.Steps {
		hs := htmlStep{Index: i, Step: s, Violations: byStep[s.StepID]}
		for _, x := range hs.Violations {
			if policy.SeverityRank(x.Severity) > policy.SeverityRank(hs.Severity) {
				hs.Severity = x.Severity
			}
		}
		hs.Color = severityColor[hs.Severity]
		if e, ok := a.Explanations[s.StepID]; ok {
			hs.Explanation = &e
		}
		if _, dup := v.StepByID[s.StepID]; !dup {
			v.StepByID[s.StepID] = i
		}
		v.Steps = append(v.Steps, hs)
	}
	for _, s := range policy.Severities {
		v.Severity = append(v.Severity, sevCount{s, a.SeverityCounts[s], severityColor[s]})
	}
	for _, x := range a.Violations {
		row := htmlViolation{Violation: x}
		if i, ok := v.StepByID[x.StepID]; ok {
			row.Found, row.Index, row.Step = true, i, &v.Steps[i]
		}
		v.Rows = append(v.Rows, row)
	}
	v.Graph = graphSVG(v.Steps, v.StepByID, a.Graph)
	v.Timeline = timelineSVG(v.Steps)
	var b bytes.Buffer
	if err := htmlTemplates.ExecuteTemplate(&b, "audit.html.tmpl", v); err != nil {
		return nil, fmt.Errorf("html: %w", err)
	}
	return b.Bytes(), nil
}

// graphSVG lays the steps out top to bottom in the order they ran: the
// sequence runs down the middle, parent edges curve on the left and data
// flows on the right.
func graphSVG(steps []htmlStep, index map[string]int, g execgraph.Graph) svgGraph {
	const top, gap, w, h, x = 20, 56, 320, 36, 160
	out := svgGraph{Width: x + w + 160, Height: top + gap*len(steps) + 10}
	for i, s := range steps {
		label := fmt.Sprintf("%d · %s %s", i, s.Type, s.Name)
		if len([]rune(label)) > 40 {
			label = string([]rune(label)[:39]) + "…"
		}
		title := fmt.Sprintf("step %s: %s %s", s.StepID, s.Type, s.Name)
		for _, v := range s.Violations {
			title += fmt.Sprintf("\n%s %s: %s", strings.ToUpper(v.Severity), v.RuleID, v.Description)
		}
		out.Nodes = append(out.Nodes, svgNode{X: x, Y: top + gap*i, W: w, H: h, Color: s.Color, Label: label, Title: title,
			Href: fmt.Sprintf("#step-%d", i)})
	}
	mid := func(i int) int { return top + gap*i + h/2 }
	for _, e := range g.Edges {
		from, okF := index[e.From]
		to, okT := index[e.To]
		if !okF || !okT {
			continue
		}
		switch e.Kind {
		case execgraph.KindSequence:
			out.Edges = append(out.Edges, svgEdge{Class: "seq", Title: e.From + " → " + e.To,
				Path: fmt.Sprintf("M%d %d L%d %d", x+w/2, top+gap*from+h, x+w/2, top+gap*to)})
		case execgraph.KindParent:
			bend := 30 + 12*min(abs(to-from), 8)
			out.Edges = append(out.Edges, svgEdge{Class: "parent", Title: "parent: " + e.From + " → " + e.To,
				Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x, mid(from), x-bend, mid(from), x-bend, mid(to), x, mid(to))})
		case execgraph.KindDataFlow:
			bend := 30 + 12*min(abs(to-from), 8)
			out.Edges = append(out.Edges, svgEdge{Class: "flow", Title: "data: " + e.From + " → " + e.To + ": " + e.Value,
				Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x+w, mid(from), x+w+bend, mid(from), x+w+bend, mid(to), x+w, mid(to))})
		}
	}
	return out
}

// timelineSVG places the steps on a line by their timestamps, or by their
// order when the trace has too few.
func timelineSVG(steps []htmlStep) svgGraph {
	const width, left, right, y = 900, 20, 20, 30
	out := svgGraph{Width: width, Height: 60}
	times := make([]time.Time, len(steps))
	var first, last time.Time
	valid := 0
	for i, s := range steps {
		t, err := time.Parse(time.RFC3339Nano, s.Timestamp)
		if err != nil {
			continue
		}
		times[i] = t
		valid++
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	span := last.Sub(first)
	byTime := valid == len(steps) && span > 0
	for i, s := range steps {
		pos := 0.5
		switch {
		case byTime:
			pos = float64(times[i].Sub(first)) / float64(span)
		case len(steps) > 1:
			pos = float64(i) / float64(len(steps)-1)
		}
		cx := left + int(pos*float64(width-left-right))
		title := fmt.Sprintf("%d · %s %s", i, s.Type, s.Name)
		if s.Timestamp != "" {
			title += " at " + s.Timestamp
		}
		out.Nodes = append(out.Nodes, svgNode{X: cx, Y: y, W: 6, Color: s.Color, Title: title, Href: fmt.Sprintf("#step-%d", i)})
	}
	if byTime {
		out.Caption = first.UTC().Format(time.RFC3339) + " – " + last.UTC().Format(time.RFC3339) + " (" + span.String() + ")"
	}
	return out
}

// BatchRow is one input of a batch page.
type BatchRow struct {
	Entry
	Link string // the trace's report, relative to the page ("" for none)
}

type htmlBatch struct {
	*Batch
	Rows     []BatchRow
	Severity []sevCount
}

// BatchHTML renders a batch as a self-contained page: its totals and a
// table of every input, sortable by any column, linking to each trace's
// report.
func BatchHTML(b *Batch, rows []BatchRow) ([]byte, error) {
	v := htmlBatch{Batch: b, Rows: rows}
	for _, s := range policy.Severities {
		v.Severity = append(v.Severity, sevCount{s, b.SeverityCounts[s], severityColor[s]})
	}
	var out bytes.Buffer
	if err := htmlTemplates.ExecuteTemplate(&out, "batch.html.tmpl", v); err != nil {
		return nil, fmt.Errorf("html: %w", err)
	}
	return out.Bytes(), nil
}

type svgBar struct {
	X, Y, W, H int
	Color      string
	Title      string
}

type svgText struct {
	X, Y int
	Text string
}

type trendsChart struct {
	Width, Height int
	Bars          []svgBar
	Mean, P95     string // polyline points
	Labels        []svgText
	Ticks         []svgText
}

type htmlTrends struct {
	*Trends
	Chart trendsChart
}

// TrendsHTML renders the trends as a page: the table, and a chart of the
// violations per day by severity (stacked bars, left axis) with the mean
// and p95 risk (lines, right axis, 0–100).
func TrendsHTML(t *Trends) ([]byte, error) {
	const left, right, top, bottom, plotH = 50, 50, 20, 40, 260
	slot := 60
	c := trendsChart{Width: left + right + slot*len(t.Days), Height: top + plotH + bottom}
	maxV := 1
	for _, d := range t.Days {
		n := 0
		for _, s := range policy.Severities {
			n += d.BySeverity[s]
		}
		maxV = max(maxV, n)
	}
	y := func(v, of int) int { return top + plotH - v*plotH/of }
	var mean, p95 []string
	for i, d := range t.Days {
		x := left + slot*i
		base := 0
		for j := len(policy.Severities) - 1; j >= 0; j-- { // low at the bottom, critical on top
			s := policy.Severities[j]
			n := d.BySeverity[s]
			if n == 0 {
				continue
			}
			c.Bars = append(c.Bars, svgBar{X: x + 12, Y: y(base+n, maxV), W: slot - 24, H: y(base, maxV) - y(base+n, maxV),
				Color: severityColor[s], Title: fmt.Sprintf("%s: %d %s", d.Date, n, s)})
			base += n
		}
		mid := x + slot/2
		mean = append(mean, fmt.Sprintf("%d,%d", mid, top+plotH-int(d.MeanRisk*plotH/100)))
		p95 = append(p95, fmt.Sprintf("%d,%d", mid, y(d.P95Risk, 100)))
		c.Labels = append(c.Labels, svgText{X: mid, Y: top + plotH + 18, Text: d.Date[5:]})
	}
	c.Mean, c.P95 = strings.Join(mean, " "), strings.Join(p95, " ")
	for _, v := range []int{0, maxV / 2, maxV} {
		c.Ticks = append(c.Ticks, svgText{X: left - 8, Y: y(v, maxV) + 4, Text: fmt.Sprint(v)})
	}
	var b bytes.Buffer
	if err := htmlTemplates.ExecuteTemplate(&b, "trends.html.tmpl", htmlTrends{Trends: t, Chart: c}); err != nil {
		return nil, fmt.Errorf("html: %w", err)
	}
	return b.Bytes(), nil
}
