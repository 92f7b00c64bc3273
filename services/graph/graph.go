// Package graph is the service that adds the execution graph to each
// canonical trace.
package graph

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the durable consumer this service reads (troy.trace.>).
const Consumer = pipelines.ConsumerGraph

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageGraph}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageTrace)}

// Config tunes the service.
type Config struct{ Workers int }

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 8} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("graph: workers must be at least 1, got %d", c.Workers)
	}
	return nil
}

// Service is the graph stage.
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

// Handle is the stage: a canonical trace in, the trace with its execution
// graph out, addressed to troy.graph.<run>. It knows nothing of the
// transport (a test runs it on watermill's gochannel).
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	var tr trace.Trace
	if err := events.Unmarshal(m.Payload, &tr); err != nil {
		return nil, bus.Permanentf("malformed canonical trace: %w", err)
	}
	g := events.Graphed{Trace: &tr}
	if err := g.Validate(); err != nil {
		return nil, bus.Permanent(err)
	}
	g.Graph = execgraph.Build(&tr)
	body, err := events.Marshal(g)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	return []*message.Message{bus.NewOutput(bus.StageGraph, m.Metadata, tr.TraceID, m.Metadata.Get(bus.HeaderPolicy), body)}, nil
}
