// Package evaluator is the service that checks every step of a trace against
// the policy version its message names.
package evaluator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the durable consumer this service reads (troy.graph.>).
const Consumer = pipelines.ConsumerEvaluator

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageEval, bus.StageViolations}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageGraph)}

// Config tunes the service.
type Config struct {
	Workers int
	// DefaultPolicy (a policy id, or a sha256: hash) evaluates traces whose
	// messages name no policy. By id, a newly pushed version takes over
	// without a restart.
	DefaultPolicy string
	// Version is troy's version, named in each finding's metadata.
	Version string
	Now     func() time.Time
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 8, Now: time.Now} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("evaluator: workers must be at least 1, got %d", c.Workers)
	}
	if c.Now == nil {
		return errors.New("evaluator: no clock")
	}
	return nil
}

// Service is the evaluator stage.
type Service struct {
	deps     bus.Deps
	cfg      Config
	policies *policystore.Store
}

// New builds the service.
func New(ctx context.Context, deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := policystore.Open(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	store.SetDefault(cfg.DefaultPolicy)
	return &Service{deps: deps, cfg: cfg, policies: store}, nil
}

// Run consumes until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	if err := s.policies.Watch(ctx); err != nil {
		return err
	}
	return bus.RunStage(ctx, s.deps, Consumer, s.cfg.Workers, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) error {
	g, err := events.Decode[events.Graphed](m.Data())
	if err != nil {
		return bus.Permanent(err)
	}
	ref := m.Headers().Get(bus.HeaderPolicy)
	if id, ok := g.Trace.Metadata["policy_id"].(string); ok && ref == "" {
		ref = id // a trace may name its policy
	}
	engine, err := s.engine(ctx, ref)
	if err != nil {
		return err
	}
	res := events.Evaluated{TraceID: g.Trace.TraceID, PolicyID: engine.Policy().PolicyID, PolicyHash: engine.Hash(),
		Result: engine.EvaluateContext(ctx, g.Trace)}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("evaluate %s: %w (it is redelivered)", g.Trace.TraceID, err) // shutting down: not a verdict
	}
	body, err := events.Marshal(res)
	if err != nil {
		return bus.Permanent(err)
	}
	out := bus.Forward(m.Headers(), m, g.Trace.TraceID)
	out.Set(bus.HeaderPolicy, engine.Hash())
	run := bus.RunOf(m.Subject())
	// Findings go out first and on their own subjects: a SIEM never waits
	// for the score, the explainer or the report. A streamed trace's were
	// published as its steps arrived.
	if m.Headers().Get(bus.HeaderStreamed) == "" {
		if err := s.publishFindings(ctx, g.Trace, res, out.Get(bus.HeaderKey), run); err != nil {
			return err
		}
	}
	return bus.Publish(ctx, s.deps.JS, bus.Out{Subject: bus.Subject(bus.StageEval, run), Data: body,
		Header: out, MsgID: bus.MsgID(bus.StageEval, out.Get(bus.HeaderKey), engine.Hash())})
}

// publishFindings sends one OCSF finding per violation (see ocsf.Publish).
func (s *Service) publishFindings(ctx context.Context, t *trace.Trace, res events.Evaluated, key, run string) error {
	c := ocsf.Context{Trace: t, PolicyID: res.PolicyID, PolicyHash: res.PolicyHash, Run: run, Product: s.cfg.Version, Now: s.cfg.Now()}
	return ocsf.Publish(ctx, s.deps.JS, key, res.Violations, c)
}

func (s *Service) engine(ctx context.Context, hash string) (*policy.Engine, error) {
	if hash == "" && s.cfg.DefaultPolicy == "" {
		return nil, bus.Permanentf("message names no policy (%s header) and this evaluator has no default: start it with --policy", bus.HeaderPolicy)
	}
	e, err := s.policies.Engine(ctx, hash) // "" resolves to the default
	if errors.Is(err, policystore.ErrNotFound) || errors.Is(err, policy.ErrInvalid) {
		return nil, bus.Permanent(err)
	}
	return e, err
}
