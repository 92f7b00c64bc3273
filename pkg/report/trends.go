package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/troy-audit/troy/pkg/policy"
)

// Day is one day of audits in a trends table.
type Day struct {
	Date       string         `json:"date"` // YYYY-MM-DD
	Traces     int            `json:"traces"`
	BySeverity map[string]int `json:"violations_by_severity"`
	ByRule     map[string]int `json:"violations_by_rule"`
	MeanRisk   float64        `json:"mean_risk"`
	P95Risk    int            `json:"p95_risk"`
}

// RuleMove is how a rule's rate (violations per trace) moved on the latest
// day against the days before it.
type RuleMove struct {
	RuleID string  `json:"rule_id"`
	Before float64 `json:"before"`
	Latest float64 `json:"latest"`
}

// Trends is the audits of a logs folder, day by day.
type Trends struct {
	Days    []Day      `json:"days"`
	Moved   []RuleMove `json:"rules_moved"`
	Skipped []string   `json:"skipped,omitempty"` // folders that are not days, or hold no audit
}

// LoadTrends reads every logs/<YYYY-MM-DD>/ folder of dir (what troy audit
// and audit-batch write by default).
func LoadTrends(dir string) (*Trends, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	t := &Trends{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := time.Parse(time.DateOnly, e.Name()); err != nil {
			t.Skipped = append(t.Skipped, e.Name()+" (not a date)")
			continue
		}
		findings, err := LoadFindings(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Skipped = append(t.Skipped, e.Name()+" ("+err.Error()+")")
			continue
		}
		t.Days = append(t.Days, DayOf(e.Name(), findings))
	}
	if len(t.Days) == 0 {
		return nil, fmt.Errorf("%s holds no day of audits: want folders named YYYY-MM-DD as troy audit and audit-batch write (logs/<date>/)", dir)
	}
	slices.SortFunc(t.Days, func(a, b Day) int { return cmp.Compare(a.Date, b.Date) })
	t.Moved = movedRules(t.Days, 5)
	return t, nil
}

// DayOf totals one day's findings.
func DayOf(date string, findings []Findings) Day {
	d := Day{Date: date, Traces: len(findings), BySeverity: map[string]int{}, ByRule: map[string]int{}}
	for _, s := range policy.Severities {
		d.BySeverity[s] = 0
	}
	risks := make([]int, 0, len(findings))
	sum := 0
	for _, f := range findings {
		for _, v := range f.Violations {
			d.BySeverity[v.Severity]++
			d.ByRule[v.RuleID]++
		}
		risks = append(risks, f.RiskScore)
		sum += f.RiskScore
	}
	if len(risks) > 0 {
		slices.Sort(risks)
		d.MeanRisk = float64(sum) / float64(len(risks))
		d.P95Risk = risks[int(math.Ceil(0.95*float64(len(risks))))-1] // nearest rank
	}
	return d
}

// movedRules compares each rule's rate on the latest day with its rate
// over the days before, largest change first.
func movedRules(days []Day, top int) []RuleMove {
	if len(days) < 2 {
		return nil
	}
	last := days[len(days)-1]
	before := map[string]int{}
	traces := 0
	for _, d := range days[:len(days)-1] {
		traces += d.Traces
		for r, n := range d.ByRule {
			before[r] += n
		}
	}
	rate := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return float64(n) / float64(of)
	}
	var out []RuleMove
	for r := range mapsUnion(before, last.ByRule) {
		m := RuleMove{RuleID: r, Before: rate(before[r], traces), Latest: rate(last.ByRule[r], last.Traces)}
		if m.Before != m.Latest {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b RuleMove) int {
		return cmp.Or(cmp.Compare(math.Abs(b.Latest-b.Before), math.Abs(a.Latest-a.Before)), cmp.Compare(a.RuleID, b.RuleID))
	})
	return out[:min(top, len(out))]
}

func mapsUnion(a, b map[string]int) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// WriteText prints the trends as a table.
func (t *Trends) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%-10s  %6s  %8s  %4s  %6s  %3s  %9s  %8s\n", "day", "traces", "critical", "high", "medium", "low", "mean risk", "p95 risk")
	for _, d := range t.Days {
		fmt.Fprintf(w, "%-10s  %6d  %8d  %4d  %6d  %3d  %9.1f  %8d\n", d.Date, d.Traces, d.BySeverity["critical"], d.BySeverity["high"],
			d.BySeverity["medium"], d.BySeverity["low"], d.MeanRisk, d.P95Risk)
	}
	if len(t.Moved) > 0 {
		fmt.Fprintf(w, "\nrules that moved most (violations per trace, %s against the days before):\n", t.Days[len(t.Days)-1].Date)
		for _, m := range t.Moved {
			fmt.Fprintf(w, "  %-28s %.2f → %.2f (%+.2f)\n", m.RuleID, m.Before, m.Latest, m.Latest-m.Before)
		}
	}
	if len(t.Skipped) > 0 {
		fmt.Fprintf(w, "\nskipped: %s\n", strings.Join(t.Skipped, "; "))
	}
}
