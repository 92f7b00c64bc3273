package report

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/troy-audit/troy/pkg/policy"
)

// Change is one violation in a regression diff.
type Change struct {
	TraceID     string `json:"trace_id"`
	RuleID      string `json:"rule_id"`
	StepID      string `json:"step_id"`
	Severity    string `json:"severity"`
	Description string `json:"description"`
}

// RiskDelta is a trace whose risk score moved.
type RiskDelta struct {
	TraceID string `json:"trace_id"`
	Old     int    `json:"old"`
	New     int    `json:"new"`
}

// Regression compares two audits, or two batches: which violations are
// new, fixed or unchanged — one violation being a trace, a rule and a
// step — which traces' risk moved, and which traces are only on one side.
type Regression struct {
	Old       string      `json:"old"`
	New       string      `json:"new"`
	OldTraces int         `json:"old_traces"`
	NewTraces int         `json:"new_traces"`
	Matched   int         `json:"traces_in_both"` // compared: the rest is added or missing
	NewV      []Change    `json:"new_violations"`
	Fixed     []Change    `json:"fixed_violations"`
	Unchanged int         `json:"unchanged_violations"`
	Risk      []RiskDelta `json:"risk_changes"`
	Added     []string    `json:"traces_added"`
	Missing   []string    `json:"traces_missing"`
}

// LoadFindings reads the audited traces of an audit.json file, or of a
// batch folder (its batch.json, else every <trace>/audit.json in it).
// Rejected inputs are not findings and are left out.
func LoadFindings(path string) ([]Findings, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		f, err := ReadFindings(path, filepath.Base(path))
		if err != nil {
			return nil, err
		}
		return []Findings{f}, nil
	}
	var files []string
	if b, err := os.ReadFile(filepath.Join(path, "batch.json")); err == nil {
		var batch Batch
		if err := json.Unmarshal(b, &batch); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(path, "batch.json"), err)
		}
		for _, e := range batch.Entries {
			// a report path outside the folder is not one troy wrote
			if e.Status == StatusAudited && e.Report != "" && filepath.IsLocal(filepath.FromSlash(e.Report)) {
				files = append(files, filepath.Join(path, filepath.Dir(filepath.FromSlash(e.Report)), JSONFile))
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// and every trace folder beside (troy audit writes logs/<date>/<trace_id>/);
	// a trace both in the batch and beside counts once (below)
	more, err := filepath.Glob(filepath.Join(path, "*", JSONFile))
	if err != nil {
		return nil, err
	}
	files = append(files, more...)
	if direct := filepath.Join(path, JSONFile); fileExists(direct) {
		files = append(files, direct) // troy audit's folder: one audit.json
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no audit: want an audit.json, or a folder troy audit or audit-batch wrote", path)
	}
	out := make([]Findings, 0, len(files))
	seen, read := map[string]bool{}, map[string]bool{}
	for _, file := range files {
		if read[filepath.Clean(file)] { // the batch's entries are also its folders
			continue
		}
		read[filepath.Clean(file)] = true
		f, err := ReadFindings(file, file)
		if err != nil {
			return nil, err
		}
		if seen[f.TraceID] { // a trace in the batch and in the folder's own audit.json counts once
			continue
		}
		seen[f.TraceID] = true
		out = append(out, f)
	}
	return out, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ReadFindings reads an audit.json file's findings, naming the input source.
func ReadFindings(file, source string) (Findings, error) {
	a, err := ReadAudit(file)
	if err != nil {
		return Findings{}, err
	}
	return FindingsOf(source, a), nil
}

// ReadAudit reads an audit.json written earlier (DecodeAudit).
func ReadAudit(file string) (*Audit, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return DecodeAudit(b, file)
}

// DecodeAudit decodes an audit.json and checks what every reader of one
// relies on: a trace with an id, and no step missing (a null step).
// source names it in errors.
func DecodeAudit(b []byte, source string) (*Audit, error) {
	var a Audit
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%s: not an audit.json: %w", source, err)
	}
	if a.Trace == nil || a.Trace.TraceID == "" {
		return nil, fmt.Errorf("%s: not an audit.json: no trace in it", source)
	}
	for i, st := range a.Trace.Steps {
		if st == nil {
			return nil, fmt.Errorf("%s: not an audit.json troy wrote: steps[%d] is null", source, i)
		}
	}
	return &a, nil
}

type changeKey struct{ trace, rule, step string }

// DiffRuns compares the findings of two runs, matched by trace id.
func DiffRuns(oldName string, old []Findings, newName string, cur []Findings) Regression {
	r := Regression{Old: oldName, New: newName, OldTraces: len(old), NewTraces: len(cur),
		NewV: []Change{}, Fixed: []Change{}, Risk: []RiskDelta{}, Added: []string{}, Missing: []string{}}
	index := func(all []Findings) (map[string]Findings, map[changeKey]Change) {
		traces, viols := map[string]Findings{}, map[changeKey]Change{}
		for _, f := range all {
			traces[f.TraceID] = f
			for _, v := range f.Violations {
				viols[changeKey{f.TraceID, v.RuleID, v.StepID}] = Change{TraceID: f.TraceID, RuleID: v.RuleID, StepID: v.StepID,
					Severity: v.Severity, Description: v.Description}
			}
		}
		return traces, viols
	}
	oldT, oldV := index(old)
	newT, newV := index(cur)
	for k, c := range newV {
		if _, ok := oldV[k]; ok {
			r.Unchanged++
		} else if _, had := oldT[k.trace]; had { // a trace only on one side is added or missing, not a regression in it
			r.NewV = append(r.NewV, c)
		}
	}
	for k, c := range oldV {
		if _, ok := newV[k]; !ok {
			if _, has := newT[k.trace]; has {
				r.Fixed = append(r.Fixed, c)
			}
		}
	}
	for id, n := range newT {
		o, ok := oldT[id]
		if ok {
			r.Matched++
		}
		switch {
		case !ok:
			r.Added = append(r.Added, id)
		case o.RiskScore != n.RiskScore:
			r.Risk = append(r.Risk, RiskDelta{TraceID: id, Old: o.RiskScore, New: n.RiskScore})
		}
	}
	for id := range oldT {
		if _, ok := newT[id]; !ok {
			r.Missing = append(r.Missing, id)
		}
	}
	bySeverity := func(a, b Change) int {
		return cmp.Or(policy.SeverityRank(b.Severity)-policy.SeverityRank(a.Severity), cmp.Compare(a.TraceID, b.TraceID),
			cmp.Compare(a.RuleID, b.RuleID), cmp.Compare(a.StepID, b.StepID))
	}
	slices.SortFunc(r.NewV, bySeverity)
	slices.SortFunc(r.Fixed, bySeverity)
	slices.SortFunc(r.Risk, func(a, b RiskDelta) int {
		return cmp.Or(cmp.Compare(abs(b.New-b.Old), abs(a.New-a.Old)), cmp.Compare(a.TraceID, b.TraceID))
	})
	slices.Sort(r.Added)
	slices.Sort(r.Missing)
	return r
}

func abs(n int) int { return max(n, -n) }

// NewAtOrAbove counts the new violations at or above a severity.
func (r Regression) NewAtOrAbove(severity string) int {
	n := 0
	for _, c := range r.NewV {
		if policy.SeverityRank(c.Severity) >= policy.SeverityRank(severity) {
			n++
		}
	}
	return n
}

// WriteText prints the diff for a terminal or a CI log.
func (r Regression) WriteText(w io.Writer) {
	fmt.Fprintf(w, "troy diff: %s → %s\n", r.Old, r.New)
	fmt.Fprintf(w, "traces: %d → %d (%d in both, %d added, %d missing)\n", r.OldTraces, r.NewTraces, r.Matched, len(r.Added), len(r.Missing))
	if r.Matched == 0 && r.OldTraces > 0 && r.NewTraces > 0 {
		fmt.Fprintln(w, "  no trace is in both: traces are matched by trace_id, so nothing was compared (give the agent's runs stable trace ids)")
	}
	fmt.Fprintf(w, "violations: %d new%s, %d fixed%s, %d unchanged\n", len(r.NewV), severityNote(r.NewV), len(r.Fixed), severityNote(r.Fixed), r.Unchanged)
	for _, c := range r.NewV {
		fmt.Fprintf(w, "  NEW    %-8s %s  trace %s step %s%s\n", c.Severity, c.RuleID, c.TraceID, c.StepID, colonThen(firstLine(c.Description)))
	}
	for _, c := range r.Fixed {
		fmt.Fprintf(w, "  FIXED  %-8s %s  trace %s step %s%s\n", c.Severity, c.RuleID, c.TraceID, c.StepID, colonThen(firstLine(c.Description)))
	}
	for _, d := range r.Risk {
		fmt.Fprintf(w, "  RISK   %s %d → %d (%+d)\n", d.TraceID, d.Old, d.New, d.New-d.Old)
	}
	for _, id := range r.Added {
		fmt.Fprintf(w, "  ADDED  %s\n", id)
	}
	for _, id := range r.Missing {
		fmt.Fprintf(w, "  MISSING %s\n", id)
	}
}

// severityNote is " (1 critical, 2 high)", or "" for none.
func severityNote(cs []Change) string {
	if len(cs) == 0 {
		return ""
	}
	counts := map[string]int{}
	for _, c := range cs {
		counts[c.Severity]++
	}
	return " (" + SeverityLine(counts) + ")"
}
