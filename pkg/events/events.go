// Package events defines the payloads that travel between pipeline stages,
// one type per subject, with the checks a consumer runs before trusting one.
package events

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/trace"
)

// Graphed is published on troy.graph.<run>: a canonical trace and its graph.
type Graphed struct {
	Trace *trace.Trace    `json:"trace"`
	Graph execgraph.Graph `json:"graph"`
}

// Validate checks what a consumer relies on.
func (g *Graphed) Validate() error { return checkTrace(g.Trace) }

// Evaluated is published on troy.eval.<run>.
type Evaluated struct {
	TraceID    string `json:"trace_id"`
	PolicyID   string `json:"policy_id"`
	PolicyHash string `json:"policy_hash"`
	policy.Result
}

// Validate checks what a consumer relies on.
func (e *Evaluated) Validate() error {
	if e.TraceID == "" || e.PolicyHash == "" {
		return errors.New("evaluation result without trace_id or policy_hash")
	}
	if err := trace.ValidateID(e.TraceID); err != nil {
		return fmt.Errorf("trace_id %w", err)
	}
	return nil
}

// Scored is published on troy.score.<run>: an evaluation and its score.
type Scored struct {
	Evaluated
	score.Score
}

// Explained is published on troy.explain.<run>. It carries the trace and
// graph so the reporter can join it with the score alone.
type Explained struct {
	Trace       *trace.Trace    `json:"trace"`
	Graph       execgraph.Graph `json:"graph"`
	Explanation explain.Trace   `json:"explanation"`
}

// Validate checks what a consumer relies on.
func (e *Explained) Validate() error { return checkTrace(e.Trace) }

// Reported is published on troy.report.<run>: the finished audit and its
// markdown rendering.
type Reported struct {
	Audit    *report.Audit `json:"audit"`
	Markdown string        `json:"markdown"`
	// Responses are the LLM's raw answers by file name, for the audit trail
	// (llm_responses/ beside the report).
	Responses map[string]string `json:"responses,omitempty"`
}

// Validate checks what a consumer relies on.
func (r *Reported) Validate() error {
	if r.Audit == nil {
		return errors.New("report without audit")
	}
	return checkTrace(r.Audit.Trace)
}

// Rejected is published on troy.rejected.<run> for input that is not a valid
// trace, with every problem found.
type Rejected struct {
	Source   string          `json:"source,omitempty"`
	TraceID  string          `json:"trace_id,omitempty"`
	Problems []trace.Problem `json:"problems"`
}

// Validate checks what a consumer relies on.
func (r *Rejected) Validate() error {
	if len(r.Problems) == 0 {
		return errors.New("rejection without problems")
	}
	return nil
}

// CheckExplained runs Decode[Explained]'s checks without building the trace
// (its steps' inputs and outputs are most of a pipeline message's decoding
// cost): for a stage that only stores the message for now, and decodes it
// in full when it uses it. It returns the trace id.
func CheckExplained(data []byte) (string, error) {
	var p struct {
		Trace *struct {
			TraceID string            `json:"trace_id"`
			Steps   []json.RawMessage `json:"steps"`
		} `json:"trace"`
	}
	fail := func(err error) (string, error) { return "", fmt.Errorf("malformed *events.Explained: %w", err) }
	if err := Unmarshal(data, &p); err != nil {
		return fail(err)
	}
	if p.Trace == nil || p.Trace.TraceID == "" || len(p.Trace.Steps) == 0 {
		return fail(errors.New("message carries no trace (trace_id and steps are required)"))
	}
	if err := trace.ValidateID(p.Trace.TraceID); err != nil {
		return fail(fmt.Errorf("trace_id %w", err))
	}
	for i, st := range p.Trace.Steps {
		if string(st) == "null" {
			return fail(fmt.Errorf("trace %s: steps[%d] is null", p.Trace.TraceID, i))
		}
	}
	return p.Trace.TraceID, nil
}

func checkTrace(t *trace.Trace) error {
	if t == nil || t.TraceID == "" || len(t.Steps) == 0 {
		return errors.New("message carries no trace (trace_id and steps are required)")
	}
	if err := trace.ValidateID(t.TraceID); err != nil {
		return fmt.Errorf("trace_id %w", err)
	}
	for i, s := range t.Steps {
		if s == nil {
			return fmt.Errorf("trace %s: steps[%d] is null", t.TraceID, i)
		}
	}
	return nil
}

// validator is every payload type.
type validator interface{ Validate() error }

// Decode unmarshals and validates a payload; any failure means the message
// can never be processed.
func Decode[T any, P interface {
	*T
	validator
}](data []byte) (P, error) {
	p := P(new(T))
	if err := Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("malformed %T: %w", p, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("malformed %T: %w", p, err)
	}
	return p, nil
}
