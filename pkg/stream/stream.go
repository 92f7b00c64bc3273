// Package stream audits a trace while it arrives step by step: it keeps the
// steps so far and reports each violation the moment it is certain, once.
//
// When is a verdict certain? A rule that reads only the step and earlier
// ones is decided when the step arrives. A rule that also looks ahead only
// through any(…) of later steps, outside any negation (any_next, any_step),
// can only turn true as steps arrive, so it fires the moment it does. Any
// other look-ahead (not any_next(…), all/count/len over later steps,
// next_step == nil) can change until the end, so it is decided when the
// trace ends. Reported findings are never retracted.
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

// DefaultLimits keep an open trace small enough for one KV entry.
func DefaultLimits() Limits { return Limits{MaxSteps: 2000, MaxBytes: 8 << 20} }

// ErrLimit is returned when a trace outgrows its limits; it is then closed.
var ErrLimit = errors.New("trace over its streaming limits")

// State is one open trace.
type State struct {
	TraceID    string            `json:"trace_id"`
	Agent      string            `json:"agent_name"`
	Metadata   map[string]any    `json:"metadata,omitempty"`
	PolicyHash string            `json:"policy_hash"`
	Steps      []*trace.Step     `json:"steps"`
	Bytes      int               `json:"bytes"`
	Reported   map[string]bool   `json:"reported"` // rule \x00 step id
	Arrived    map[string]uint64 `json:"arrived"`  // step id -> its place in the order it was sent
	LastSeen   time.Time         `json:"last_seen"`
	// EndAt is when the sender said the trace is complete; it is closed a
	// moment later, so steps still in flight beside the end are not lost.
	EndAt   time.Time `json:"end_at,omitzero"`
	EndWhy  string    `json:"end_why,omitempty"`
	Closing bool      `json:"closing"`
}

// New starts a trace.
func New(traceID, agent string, meta map[string]any, policyHash string, now time.Time) *State {
	if agent == "" {
		agent = "agent"
	}
	return &State{TraceID: traceID, Agent: agent, Metadata: meta, PolicyHash: policyHash,
		Reported: map[string]bool{}, Arrived: map[string]uint64{}, LastSeen: now}
}

// Trace is the trace so far.
func (s *State) Trace() *trace.Trace {
	return &trace.Trace{TraceID: s.TraceID, AgentName: s.Agent, Metadata: s.Metadata, Steps: s.Steps}
}

// Add takes newly arrived steps, ignoring ones already seen (same step id),
// and keeps the steps ordered by timestamp when steps carry one, else by the
// order they were sent: seq is the sending order of this batch (its stream
// sequence), which concurrent workers may handle out of turn. It returns the
// position of the earliest step added (len(Steps) when none was), so later
// steps can be decided again.
func (s *State) Add(steps []*trace.Step, seq uint64, size int, lim Limits, now time.Time) (int, error) {
	s.LastSeen = now
	first := len(s.Steps)
	var fresh []*trace.Step
	for i, st := range steps {
		if _, dup := s.Arrived[st.StepID]; dup {
			continue
		}
		s.Arrived[st.StepID] = seq<<20 | uint64(i) // a batch holds fewer than 2^20 steps
		fresh = append(fresh, st)
	}
	if len(fresh) == 0 {
		return first, nil
	}
	if lim.MaxSteps > 0 && len(s.Steps)+len(fresh) > lim.MaxSteps {
		return first, fmt.Errorf("%w: %d steps, over the %d-step limit", ErrLimit, len(s.Steps)+len(fresh), lim.MaxSteps)
	}
	if s.Bytes += size; lim.MaxBytes > 0 && s.Bytes > lim.MaxBytes {
		return first, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrLimit, s.Bytes, lim.MaxBytes)
	}
	s.Steps = append(s.Steps, fresh...)
	before := make(map[string]int, len(s.Steps))
	for i, st := range s.Steps {
		before[st.StepID] = i
	}
	sort.SliceStable(s.Steps, func(i, j int) bool { return s.less(s.Steps[i], s.Steps[j]) })
	for i, st := range s.Steps {
		if i < first && before[st.StepID] >= first {
			first = i // a late step landed before earlier arrivals
		}
	}
	return first, nil
}

// less orders by timestamp when both steps have one, else by arrival.
func (s *State) less(a, b *trace.Step) bool {
	if a.Timestamp != "" && b.Timestamp != "" && a.Timestamp != b.Timestamp {
		return a.Timestamp < b.Timestamp // RFC 3339 in UTC sorts as text
	}
	return s.Arrived[a.StepID] < s.Arrived[b.StepID]
}

// Decide returns the violations that became certain: rules decided on
// arrival for steps from position `from` on, and look-ahead rules (any_next…)
// that have turned true on any step. Each is returned once over the trace's
// life.
func (s *State) Decide(e *policy.Engine, from int) []policy.Violation {
	return s.decide(e, from, false)
}

// Finish decides what is left at the end: every rule on every step.
func (s *State) Finish(e *policy.Engine) []policy.Violation {
	return s.decide(e, 0, true)
}

func (s *State) decide(e *policy.Engine, from int, end bool) []policy.Violation {
	t := s.Trace()
	var out []policy.Violation
	for r, when := range e.DecideWhen() {
		if when == policy.DecideAtEnd && !end {
			continue
		}
		start := 0
		if when == policy.DecideNow && !end {
			start = from
		}
		for i := start; i < len(t.Steps); i++ {
			v, fired, _ := e.EvaluateRule(t, r, i)
			if !fired {
				continue
			}
			key := v.RuleID + "\x00" + v.StepID
			if s.Reported[key] {
				continue
			}
			s.Reported[key] = true
			out = append(out, v)
		}
	}
	return out
}
