// Package evaluator is the service that checks every step of a trace against
// the policy version its message names.
package evaluator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
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
	return bus.RunRouterStage(ctx, s.deps, Consumer, s.cfg.Workers, s.Handle)
}

// Handle is the stage: a graphed trace in; its OCSF findings (one per
// violation, on troy.violations.<severity>.<rule>, first in the list: a
// SIEM never waits for the score, the explainer or the report) and its
// evaluation (troy.eval.<run>) out. A streamed trace's findings went out
// as its steps arrived.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	ctx := m.Context()
	g, err := events.Decode[events.Graphed](m.Payload)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	ref := m.Metadata.Get(bus.HeaderPolicy)
	if id, ok := g.Trace.Metadata["policy_id"].(string); ok && ref == "" {
		ref = id // a trace may name its policy
	}
	engine, err := s.engine(ctx, ref)
	if err != nil {
		return nil, err
	}
	res := events.Evaluated{TraceID: g.Trace.TraceID, PolicyID: engine.Policy().PolicyID, PolicyHash: engine.Hash(),
		Result: engine.EvaluateContext(ctx, g.Trace)}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evaluate %s: %w (it is redelivered)", g.Trace.TraceID, err) // shutting down: not a verdict
	}
	body, err := events.Marshal(res)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	eval := bus.NewOutput(bus.StageEval, m.Metadata, g.Trace.TraceID, engine.Hash(), body)
	eval.Metadata.Set(bus.HeaderPolicy, engine.Hash())
	if m.Metadata.Get(bus.HeaderStreamed) != "" {
		return []*message.Message{eval}, nil
	}
	c := ocsf.Context{Trace: g.Trace, PolicyID: res.PolicyID, PolicyHash: res.PolicyHash, Run: eval.Metadata.Get(bus.HeaderRun),
		Product: s.cfg.Version, Now: s.cfg.Now()}
	out, err := ocsf.Messages(eval.Metadata.Get(bus.HeaderKey), res.Violations, c)
	if err != nil {
		return nil, err
	}
	return append(out, eval), nil
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
