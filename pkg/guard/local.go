package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// Timeout bounds one check (none when zero); a check cut short blocks,
	// like any rule that cannot be evaluated.
	Timeout time.Duration
	// Recorder, when set, keeps every decision (the decision ledger). A
	// decision it cannot keep is not given: the action is blocked.
	Recorder Recorder
}

// Recorder keeps a decision; it must not wait on I/O (the guard answers
// in microseconds).
type Recorder interface {
	Record(req Request, d Decision) error
}

// Check implements Guard. The action is evaluated as the last step of a
// trace made of the history (the request's, or else the session's), so
// cross-step rules such as any_prev work live. It fails closed: whenever it
// returns an error the decision is Block, and in enforce mode a rule that
// cannot be evaluated on the action (an error, or its time or memory budget
// spent) blocks it unless the rule or policy says on_error: allow.
func (l *Local) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := l.check(ctx, req)
	if l.Recorder != nil {
		if rerr := l.Recorder.Record(req, d); rerr != nil {
			rerr = fmt.Errorf("the decision could not be recorded: %w", rerr)
			return blocked(req, rerr), errors.Join(err, rerr)
		}
	}
	return d, err
}

func (l *Local) check(ctx context.Context, req Request) (Decision, error) {
	if err := req.Validate(); err != nil {
		return blocked(req, err), err
	}
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
	}
	e, err := l.Policies.Engine(ctx, req.Policy)
	if err != nil {
		return blocked(req, err), err
	}
	history := req.History
	if history == nil && req.SessionID != "" && l.Sessions != nil {
		if history, err = l.Sessions.History(ctx, req.SessionID); err != nil {
			err = fmt.Errorf("session %s: %w", req.SessionID, err)
			return blocked(req, err), err
		}
	}
	step := req.step(history)
	steps := make([]*trace.Step, 0, len(history)+1)
	steps = append(append(steps, history...), step)
	t := &trace.Trace{TraceID: req.SessionID, AgentName: req.Agent.Name, Metadata: req.Agent.Metadata, Steps: steps}
	res := e.EvaluateStepContext(ctx, t, len(steps)-1)
	d := Decision{Decision: Allow, Mode: req.Mode, Violations: res.Violations, RuleErrors: res.RuleErrors,
		PolicyID: e.Policy().PolicyID, PolicyHash: e.Hash(), SessionID: req.SessionID}
	if req.Mode == Enforce {
		if len(res.Violations) > 0 {
			d.Decision = Block
		}
		for _, re := range res.RuleErrors {
			if e.Policy().OnErrorOf(re.RuleID) != policy.OnErrorAllow {
				d.Decision = Block
				d.Reason = fmt.Sprintf("rule %s could not be evaluated, failing closed (on_error: allow would let it pass): %s", re.RuleID, re.Error)
				break
			}
		}
	}
	if d.Decision == Allow && req.SessionID != "" && l.Sessions != nil {
		if err := l.Sessions.Append(ctx, req.SessionID, step); err != nil {
			// Unrecorded, the action would be missing from the history later
			// checks are judged on: refuse it instead.
			err = fmt.Errorf("session %s: record the allowed action: %w", req.SessionID, err)
			d.Decision, d.Reason = Block, "failing closed: "+err.Error()
			return d, err
		}
	}
	return d, nil
}

// blocked is the decision whenever a check fails: nothing runs that the
// guard could not decide on.
func blocked(req Request, err error) Decision {
	return Decision{Decision: Block, Mode: req.Mode, SessionID: req.SessionID, Reason: "failing closed: " + err.Error()}
}
