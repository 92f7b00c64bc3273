// Package scorer is the service that turns evaluation results into risk scores.
package scorer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/score"
)

// Consumer is the durable consumer this service reads (troy.eval.>).
const Consumer = pipelines.ConsumerScorer

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageScore}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageEval)}

// Config tunes the service.
type Config struct{ Workers int }

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 4} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("scorer: workers must be at least 1, got %d", c.Workers)
	}
	return nil
}

// Service is the scorer stage.
type Service struct {
	deps bus.Deps
	cfg  Config
}

// New builds the service.
func New(deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{deps: deps, cfg: cfg}, nil
}

// Run consumes until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	return bus.RunStage(ctx, s.deps, Consumer, s.cfg.Workers, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) error {
	ev, err := events.Decode[events.Evaluated](m.Data())
	if err != nil {
		return bus.Permanent(err)
	}
	body, err := events.Marshal(events.Scored{Evaluated: *ev, Score: score.Compute(ev.Violations)})
	if err != nil {
		return bus.Permanent(err)
	}
	out := bus.Forward(m.Headers(), m, ev.TraceID)
	return bus.Publish(ctx, s.deps.JS, bus.Out{Subject: bus.Subject(bus.StageScore, bus.RunOf(m.Subject())), Data: body,
		Header: out, MsgID: bus.MsgID(bus.StageScore, out.Get(bus.HeaderKey), ev.PolicyHash)})
}
