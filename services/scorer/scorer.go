// Package scorer is the service that turns evaluation results into risk scores.
package scorer

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

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

// Run consumes until ctx is cancelled, on watermill's router.
func (s *Service) Run(ctx context.Context) error {
	return bus.RunRouterStage(ctx, s.deps, Consumer, s.cfg.Workers, s.Handle)
}

// Handle is the stage: an evaluation in, the evaluation and its risk score
// out, addressed to troy.score.<run>.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	ev, err := events.Decode[events.Evaluated](m.Payload)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	body, err := events.Marshal(events.Scored{Evaluated: *ev, Score: score.Compute(ev.Violations)})
	if err != nil {
		return nil, bus.Permanent(err)
	}
	return []*message.Message{bus.NewOutput(bus.StageScore, m.Metadata, ev.TraceID, ev.PolicyHash, body)}, nil
}
