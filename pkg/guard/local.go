package guard

import (
	"context"
	"fmt"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Policies resolves a policy reference (id, hash, or "" for the default) to
// a compiled engine.
type Policies interface {
	Engine(ctx context.Context, ref string) (*policy.Engine, error)
}

// Sessions keeps the actions a session was allowed to take.
type Sessions interface {
	History(ctx context.Context, session string) ([]*trace.Step, error)
	Append(ctx context.Context, session string, step *trace.Step) error
}

// Static serves one policy whatever the request names (troy check).
type Static struct{ E *policy.Engine }

// Engine implements Policies.
func (s Static) Engine(context.Context, string) (*policy.Engine, error) { return s.E, nil }

// Local checks in-process.
type Local struct {
	Policies Policies
	Sessions Sessions // optional
}

// Check implements Guard. The action is evaluated as the last step of a
// trace made of the history (the request's, or else the session's), so
// cross-step rules such as any_prev work live.
func (l *Local) Check(ctx context.Context, req Request) (Decision, error) {
	if err := req.Validate(); err != nil {
		return Decision{}, err
	}
	e, err := l.Policies.Engine(ctx, req.Policy)
	if err != nil {
		return Decision{}, err
	}
	history := req.History
	if history == nil && req.SessionID != "" && l.Sessions != nil {
		if history, err = l.Sessions.History(ctx, req.SessionID); err != nil {
			return Decision{}, fmt.Errorf("session %s: %w", req.SessionID, err)
		}
	}
	step := req.step(history)
	steps := make([]*trace.Step, 0, len(history)+1)
	steps = append(append(steps, history...), step)
	t := &trace.Trace{TraceID: req.SessionID, AgentName: req.Agent.Name, Metadata: req.Agent.Metadata, Steps: steps}
	res := e.EvaluateStep(t, len(steps)-1)
	d := Decision{Decision: Allow, Mode: req.Mode, Violations: res.Violations, RuleErrors: res.RuleErrors,
		PolicyID: e.Policy().PolicyID, PolicyHash: e.Hash(), SessionID: req.SessionID}
	if len(res.Violations) > 0 && req.Mode == Enforce {
		d.Decision = Block
	}
	if d.Decision == Allow && req.SessionID != "" && l.Sessions != nil {
		if err := l.Sessions.Append(ctx, req.SessionID, step); err != nil {
			return d, fmt.Errorf("session %s: record the allowed action: %w", req.SessionID, err)
		}
	}
	return d, nil
}
