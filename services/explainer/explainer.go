// Package explainer is the service that explains every step of a trace. It
// runs beside the evaluator, so violations never wait for it.
package explainer

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the durable consumer this service reads (troy.graph.>).
const Consumer = pipelines.ConsumerExplainer

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageExplain}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageGraph)}

// Explainer explains one trace. The offline heuristic is the default; an LLM
// explainer replaces it without changing the stage.
type Explainer interface {
	Explain(ctx context.Context, t *trace.Trace, g execgraph.Graph) (explain.Trace, error)
}

// Heuristic is the offline explainer.
type Heuristic struct{}

// Explain implements Explainer.
func (Heuristic) Explain(_ context.Context, t *trace.Trace, g execgraph.Graph) (explain.Trace, error) {
	return explain.Heuristic(t, g), nil
}

// MustExplain explains a trace with an empty graph (tests and tools).
func (Heuristic) MustExplain(t *trace.Trace) explain.Trace {
	return explain.Heuristic(t, execgraph.Graph{})
}

// Config tunes the service.
type Config struct {
	Workers   int
	Explainer Explainer
	// Timeout bounds explaining one trace (all its LLM calls); past it the
	// attempt fails and the message is retried, then dead-lettered.
	Timeout time.Duration
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config {
	return Config{Workers: 8, Explainer: Heuristic{}, Timeout: 10 * time.Minute}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("explainer: workers must be at least 1, got %d", c.Workers)
	}
	if c.Explainer == nil {
		return fmt.Errorf("explainer: no explainer configured")
	}
	return nil
}

// Service is the explainer stage.
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

// Run consumes until ctx is cancelled, on watermill's router. Explaining
// can take many LLM calls: the transport keeps a message alive while its
// handler runs.
func (s *Service) Run(ctx context.Context) error {
	return bus.RunRouterStage(ctx, s.deps, Consumer, s.cfg.Workers, s.Handle, bus.WithTimeout(s.cfg.Timeout))
}

// Handle is the stage: a graphed trace in, its explanation out, addressed
// to troy.explain.<run>.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	g, err := events.Decode[events.Graphed](m.Payload)
	if err != nil {
		return nil, bus.Permanent(err)
	}
	ex, err := s.cfg.Explainer.Explain(m.Context(), g.Trace, g.Graph)
	if err != nil {
		return nil, fmt.Errorf("explain %s: %w", g.Trace.TraceID, err)
	}
	body, err := events.Marshal(events.Explained{Trace: g.Trace, Graph: g.Graph, Explanation: ex})
	if err != nil {
		return nil, bus.Permanent(err)
	}
	return []*message.Message{bus.NewOutput(bus.StageExplain, m.Metadata, g.Trace.TraceID, "", body)}, nil
}
