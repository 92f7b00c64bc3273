// Package stream audits a trace while it arrives step by step: it keeps the
// steps so far in memory and reports each violation the moment it is
// certain, once, so that what it reports over the trace's life is exactly
// what a batch audit of the finished trace finds.
//
// When is a verdict certain? A rule that reads only the step and earlier
// ones is decided when the step arrives. A rule that also looks ahead only
// through any(…) of later steps, outside any negation (any_next, any_step),
// can only turn true as steps arrive, so it fires the moment it does. Any
// other look-ahead (not any_next(…), all/count/len over later steps,
// next_step == nil) can change until the end, so it is decided when the
// trace ends. So is a rule that reads the trace's or agent's name or
// metadata, unless they were given up front (a start message): they may
// still arrive with the end. Reported findings are never retracted.
package stream

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Limits bound one open trace.
type Limits struct {
	MaxSteps int
	MaxBytes int // of the steps as received
}

// DefaultLimits are the whole-trace limits ingest applies to the trace the
// streamer sends for its report (less a margin for the trace's own fields),
// so a streamed trace that was taken is also reported. In memory an open
// trace takes about three times its steps' size as received: ≤ ~12 MiB.
func DefaultLimits() Limits {
	l := trace.DefaultLimits()
	return Limits{MaxSteps: l.MaxSteps, MaxBytes: l.MaxBytes - 64<<10}
}

// ErrLimit is returned when a trace outgrows its limits; it is then closed.
var ErrLimit = errors.New("trace over its streaming limits")

// Trace is one open streamed trace.
type Trace struct {
	ID         string
	Agent      string
	Metadata   map[string]any
	PolicyHash string
	// MetaFinal is set when the agent and metadata were given up front: the
	// rules that read them are then decided as steps arrive.
	MetaFinal bool
	Steps     []*trace.Step
	Bytes     int
	LastSeen  time.Time
	// Reordered counts steps that arrived after a step they precede (by
	// timestamp) had been decided: the rules that read earlier steps were
	// decided on those without them.
	Reordered int

	arrived  map[string]uint64    // step id -> its place in the order it was sent
	stamps   map[string]time.Time // step id -> its timestamp, when it has one
	reported map[firing]bool
	eval     *policy.Stepwise
	evalOf   *policy.Engine
	// pending lists, per look-ahead rule (decided when true), the steps it
	// may still fire on: not fired, and not ruled out by the rule's guard.
	// A new step re-checks only these, not every earlier step. Steps up to
	// scanned are listed; pos is each step's place.
	pending map[int][]string
	scanned int
	pos     map[string]int
}

// firing is one rule (by its place in the policy) on one step.
type firing struct {
	rule int
	step string
}

// New starts a trace.
func New(id, agent string, meta map[string]any, metaFinal bool, policyHash string, now time.Time) *Trace {
	if agent == "" {
		agent = "agent"
	}
	return &Trace{ID: id, Agent: agent, Metadata: meta, MetaFinal: metaFinal, PolicyHash: policyHash,
		LastSeen: now, arrived: map[string]uint64{}, stamps: map[string]time.Time{}, reported: map[firing]bool{}}
}

// Trace is the trace so far.
func (t *Trace) Trace() *trace.Trace {
	return &trace.Trace{TraceID: t.ID, AgentName: t.Agent, Metadata: t.Metadata, Steps: t.Steps}
}

// Add takes newly arrived steps, ignoring ones already seen (same step id),
// and keeps the steps ordered by timestamp when steps carry one, else by the
// order they were sent (seq: the stream sequence of their message). It
// returns the position of the earliest step added (len(Steps) when none
// was): the steps from there on are decided again.
func (t *Trace) Add(steps []*trace.Step, seq uint64, size int, lim Limits, now time.Time) (int, error) {
	t.LastSeen = now
	first := len(t.Steps)
	var fresh []*trace.Step
	for i, st := range steps {
		if _, dup := t.arrived[st.StepID]; dup {
			continue
		}
		fresh = append(fresh, st)
		t.arrived[st.StepID] = seq<<20 | uint64(i) // a message holds fewer than 2^20 steps
		if ts, err := time.Parse(time.RFC3339Nano, st.Timestamp); err == nil {
			t.stamps[st.StepID] = ts // compared as times: ".5Z" is after "Z", though it sorts before it as text
		}
	}
	if len(fresh) == 0 {
		return first, nil
	}
	if lim.MaxBytes > 0 && t.Bytes+size > lim.MaxBytes {
		return first, fmt.Errorf("%w: %d bytes, over the %d-byte limit (the last %d bytes were not taken)", ErrLimit, t.Bytes+size, lim.MaxBytes, size)
	}
	t.Bytes += size
	// Over the step limit, the steps that fit are taken (and audited), the
	// rest are not, and the caller closes the trace saying so.
	var over error
	if lim.MaxSteps > 0 && len(t.Steps)+len(fresh) > lim.MaxSteps {
		keep := max(lim.MaxSteps-len(t.Steps), 0)
		over = fmt.Errorf("%w: %d steps, over the %d-step limit (the last %d were not taken)", ErrLimit, len(t.Steps)+len(fresh), lim.MaxSteps, len(fresh)-keep)
		fresh = fresh[:keep]
		if len(fresh) == 0 {
			return first, over
		}
	}
	inOrder := true
	for i, st := range fresh {
		prev := (*trace.Step)(nil)
		if i > 0 {
			prev = fresh[i-1]
		} else if n := len(t.Steps); n > 0 {
			prev = t.Steps[n-1]
		}
		if prev != nil && t.less(st, prev) {
			inOrder = false
			break
		}
	}
	t.Steps = append(t.Steps, fresh...)
	if inOrder { // the common case: appended, nothing moves
		return first, over
	}
	moved := make(map[*trace.Step]bool, len(fresh))
	for _, st := range fresh {
		moved[st] = true
	}
	sort.SliceStable(t.Steps, func(i, j int) bool { return t.less(t.Steps[i], t.Steps[j]) })
	decided := first
	for i, st := range t.Steps {
		if moved[st] && i < decided {
			t.Reordered++ // a late step landed before earlier arrivals
			first = min(first, i)
		}
	}
	return first, over
}

// less orders by timestamp when both steps have one, else by arrival.
func (t *Trace) less(a, b *trace.Step) bool {
	ta, okA := t.stamps[a.StepID]
	tb, okB := t.stamps[b.StepID]
	if okA && okB && !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return t.arrived[a.StepID] < t.arrived[b.StepID]
}

// Decide returns the violations that became certain after steps were added
// (from: Add's result): rules decided on arrival for steps from position
// `from` on, and look-ahead rules (any_next…) that have turned true on any
// step. Each is returned once over the trace's life.
func (t *Trace) Decide(e *policy.Engine, from int) []policy.Violation {
	return t.decide(e, from, false)
}

// Finish decides what is left at the end: every rule on every step. The
// agent and metadata, when not given up front, are those the end brings.
func (t *Trace) Finish(e *policy.Engine, agent string, meta map[string]any) []policy.Violation {
	if !t.MetaFinal {
		if agent != "" {
			t.Agent = agent
		}
		if meta != nil {
			t.Metadata = meta
		}
		t.MetaFinal = true
	}
	return t.decide(e, 0, true)
}

func (t *Trace) decide(e *policy.Engine, from int, end bool) []policy.Violation {
	if len(t.Steps) == 0 {
		return nil
	}
	if t.evalOf != e || t.eval == nil {
		t.eval, t.evalOf, t.pending = e.Stepwise(t.Trace()), e, nil
	} else {
		t.eval.Reset(t.Trace())
	}
	info, when := e.ReadsTraceInfo(), e.DecideWhen()
	var out []policy.Violation
	fire := func(r, i int) bool {
		key := firing{r, t.Steps[i].StepID}
		if t.reported[key] {
			return true
		}
		if v, fired, _ := t.eval.Rule(r, i); fired {
			t.reported[key] = true
			out = append(out, v)
			return true
		}
		return false
	}
	if end {
		for r := range when {
			for i := range t.Steps {
				fire(r, i)
			}
		}
		return out
	}
	t.index(when, info, from)
	for r, w := range when {
		switch {
		case info[r] && !t.MetaFinal, w == policy.DecideAtEnd:
			continue // may change until the end
		case w == policy.DecideNow:
			for i := from; i < len(t.Steps); i++ {
				fire(r, i)
			}
		default: // decided when true: only the steps it may still fire on
			left := t.pending[r][:0]
			for _, id := range t.pending[r] {
				if !fire(r, t.pos[id]) {
					left = append(left, id)
				}
			}
			t.pending[r] = left
		}
	}
	return out
}

// index lists the steps from `from` on as candidates of the look-ahead
// rules; a step that landed before others (from < scanned) reindexes all.
func (t *Trace) index(when []string, info []bool, from int) {
	if t.pending == nil || from < t.scanned {
		t.pending, t.scanned, t.pos = map[int][]string{}, 0, make(map[string]int, len(t.Steps))
	}
	for i := t.scanned; i < len(t.Steps); i++ {
		id := t.Steps[i].StepID
		t.pos[id] = i
		for r, w := range when {
			if w == policy.DecideWhenTrue && (!info[r] || t.MetaFinal) && !t.reported[firing{r, id}] && !t.eval.RulesOut(r, i) {
				t.pending[r] = append(t.pending[r], id)
			}
		}
	}
	t.scanned = len(t.Steps)
}
