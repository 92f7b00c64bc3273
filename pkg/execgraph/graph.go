// Package execgraph builds the execution graph of a trace: which step started
// which, in what order they ran, and where data flowed between them.
package execgraph

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/troy-audit/troy/pkg/trace"
)

// Edge kinds.
const (
	KindParent   = "parent"
	KindSequence = "sequence"
	KindDataFlow = "data_flow"
)

// Edge links two steps by id.
type Edge struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Kind  string `json:"kind" jsonschema:"enum=parent,enum=sequence,enum=data_flow"`
	Value string `json:"value,omitempty"` // for data_flow: the value that travelled
}

// Graph is the execution graph of one trace; its nodes are the trace's steps.
type Graph struct {
	Edges []Edge `json:"edges"`
}

// Bounds on data-flow matching, so a huge step cannot make graph building slow.
const (
	minStringLen    = 4 // shorter strings ("ok", "yes") say nothing about flow
	minContainLen   = 8 // a value found inside a longer input string
	maxContainCands = 512
	maxValueShown   = 60
)

// Build returns the parent, sequence and data-flow edges of a trace.
func Build(t *trace.Trace) Graph {
	g := Graph{Edges: make([]Edge, 0, 2*len(t.Steps))}
	for i, s := range t.Steps {
		if s.ParentStepID != "" {
			g.Edges = append(g.Edges, Edge{From: s.ParentStepID, To: s.StepID, Kind: KindParent})
		}
		if i > 0 {
			g.Edges = append(g.Edges, Edge{From: t.Steps[i-1].StepID, To: s.StepID, Kind: KindSequence})
		}
	}
	g.Edges = append(g.Edges, dataFlow(t)...)
	return g
}

// dataFlow links a step to every earlier step whose output carried a value
// found in its input: the same leaf value, or a long output string inside an
// input string.
func dataFlow(t *trace.Trace) []Edge {
	var edges []Edge
	produced := map[string]int{} // leaf value -> index of the first step that output it
	var long []string            // produced strings long enough to search for
	for k, s := range t.Steps {
		if k > 0 && s.Input != nil {
			linked := map[int]string{}
			leaves(s.Input, func(v string, isString bool) {
				if from, ok := produced[v]; ok {
					if _, seen := linked[from]; !seen {
						linked[from] = v
					}
				}
				if !isString || len(v) <= minContainLen {
					return
				}
				for _, cand := range long {
					if from := produced[cand]; linked[from] == "" && strings.Contains(v, cand) {
						linked[from] = cand
					}
				}
			})
			for from := 0; from < k; from++ { // ordered output for stable graphs
				if v, ok := linked[from]; ok {
					edges = append(edges, Edge{From: t.Steps[from].StepID, To: s.StepID, Kind: KindDataFlow, Value: shorten(v)})
				}
			}
		}
		if s.Output != nil {
			leaves(s.Output, func(v string, isString bool) {
				if _, ok := produced[v]; ok {
					return
				}
				produced[v] = k
				if isString && len(v) >= minContainLen && len(long) < maxContainCands {
					long = append(long, v)
				}
			})
		}
	}
	return edges
}

// leaves calls fn for every scalar worth tracking inside a JSON value.
func leaves(v any, fn func(val string, isString bool)) {
	switch x := v.(type) {
	case string:
		if s := strings.TrimSpace(x); len(s) >= minStringLen {
			fn(s, true)
		}
	case float64:
		// small numbers (counts, flags, indexes) coincide by chance
		if math.Abs(x) >= 1000 || (x != math.Trunc(x)) {
			fn(strconv.FormatFloat(x, 'f', -1, 64), false)
		}
	case map[string]any:
		// sorted, so the value shown on an edge is the same on every run
		for _, k := range slices.Sorted(maps.Keys(x)) {
			leaves(x[k], fn)
		}
	case []any:
		for _, e := range x {
			leaves(e, fn)
		}
	}
}

func shorten(s string) string {
	r := []rune(s)
	if len(r) <= maxValueShown {
		return s
	}
	return string(r[:maxValueShown]) + "…"
}

// FedBy returns, for each step id, the ids of the steps that fed it data.
func (g Graph) FedBy() map[string][]string {
	out := map[string][]string{}
	for _, e := range g.Edges {
		if e.Kind == KindDataFlow {
			out[e.To] = append(out[e.To], e.From)
		}
	}
	return out
}
