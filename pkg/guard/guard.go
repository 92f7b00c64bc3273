// Package guard decides, before it runs, whether one proposed agent action
// is allowed by a policy. One interface, Guard, with an in-process
// implementation (Local) and remote ones over NATS and HTTP that fail closed.
package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Decisions.
const (
	Allow = "allow"
	Block = "block"
)

// Modes: enforce blocks on a violation; monitor always allows and reports.
const (
	Enforce = "enforce"
	Monitor = "monitor"
)

// Subject is the NATS request-reply subject of the guard service.
const Subject = "troy.guard.check"

// Guard checks one proposed action.
type Guard interface {
	Check(ctx context.Context, req Request) (Decision, error)
}

// Action is the step an agent proposes to take.
type Action struct {
	Type        string         `json:"type,omitempty" jsonschema:"enum=llm_call,enum=tool_call,enum=decision,enum=observation,default=tool_call"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	Input       any            `json:"input,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// Agent describes who proposes the action (agent.name, agent.metadata).
type Agent struct {
	Name     string         `json:"name,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Request asks whether an action may run.
type Request struct {
	// Policy is a policy id (its latest version) or a content hash
	// (sha256:…); empty means the guard's default.
	Policy string `json:"policy,omitempty"`
	// SessionID groups the checks of one agent run: without History, the
	// guard uses the actions it allowed earlier in the session.
	SessionID string        `json:"session_id,omitempty"`
	Agent     Agent         `json:"agent,omitempty"`
	Action    Action        `json:"action"`
	History   []*trace.Step `json:"history,omitempty"`
	Mode      string        `json:"mode,omitempty" jsonschema:"enum=enforce,enum=monitor,default=enforce"`
}

// Decision is the guard's answer.
type Decision struct {
	Decision   string             `json:"decision" jsonschema:"enum=allow,enum=block"`
	Mode       string             `json:"mode"`
	Violations []policy.Violation `json:"violations"`
	RuleErrors []policy.RuleError `json:"rule_errors,omitempty"`
	PolicyID   string             `json:"policy_id,omitempty"`
	PolicyHash string             `json:"policy_hash,omitempty"`
	SessionID  string             `json:"session_id,omitempty"`
	// Reason explains a decision not made by the policy: an unreachable
	// guard (fail closed or open), or an error.
	Reason string `json:"reason,omitempty"`
}

// ErrBadRequest marks requests that can never be checked as sent.
var ErrBadRequest = errors.New("bad guard request")

// Validate checks a request and fills in defaults.
func (r *Request) Validate() error {
	if r.Action.Type == "" {
		r.Action.Type = trace.TypeToolCall
	}
	ok := false
	for _, t := range trace.StepTypes {
		ok = ok || r.Action.Type == t
	}
	if !ok {
		return fmt.Errorf("%w: action.type %q is not one of llm_call, tool_call, decision, observation", ErrBadRequest, r.Action.Type)
	}
	if r.Action.Type == trace.TypeToolCall && r.Action.Name == "" {
		return fmt.Errorf("%w: action.name is required for a tool_call (the tool's name)", ErrBadRequest)
	}
	switch r.Mode {
	case "":
		r.Mode = Enforce
	case Enforce, Monitor:
	default:
		return fmt.Errorf("%w: mode %q is not enforce or monitor", ErrBadRequest, r.Mode)
	}
	if r.SessionID != "" {
		// a session id names a KV key (and so a subject): bounded and printable
		if err := trace.ValidateID(r.SessionID); err != nil {
			return fmt.Errorf("%w: session_id %v", ErrBadRequest, err)
		}
	}
	for i, s := range r.History {
		if s == nil || s.StepID == "" || s.Type == "" {
			return fmt.Errorf("%w: history[%d] needs step_id and type", ErrBadRequest, i)
		}
	}
	return nil
}

// step turns the action into the trace step it would become.
func (r *Request) step(history []*trace.Step) *trace.Step {
	id := "action-" + strconv.Itoa(len(history))
	for taken := true; taken; {
		taken = false
		for _, s := range history {
			if s.StepID == id {
				id += "'"
				taken = true
			}
		}
	}
	return &trace.Step{StepID: id, Type: r.Action.Type, Name: r.Action.Name, Description: r.Action.Description,
		Input: r.Action.Input, Metadata: r.Action.Metadata}
}
