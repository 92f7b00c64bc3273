// Package ingest is the service that turns raw trace documents into canonical
// traces, or into rejections that list every problem found.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/otlp"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the durable consumer this service reads (troy.ingest.>).
const Consumer = pipelines.ConsumerIngest

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageTrace, bus.StageRejected}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Subject(bus.StageIngest, "*")}

// Config tunes the service.
type Config struct {
	Workers int
	Limits  trace.Limits
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 8, Limits: trace.DefaultLimits()} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("ingest: workers must be at least 1, got %d", c.Workers)
	}
	if c.Limits.MaxBytes < 0 || c.Limits.MaxSteps < 0 {
		return errors.New("ingest: limits must not be negative")
	}
	return nil
}

// Parse reads one document in any format troy takes: its own traces, chat
// logs, and OTLP/JSON exports (format "otlp", or detected).
func Parse(data []byte, lim trace.Limits, format, fallbackID string) (*trace.Trace, error) {
	data = trace.TrimBOM(data)
	if format == trace.FormatOTLP || ((format == "" || format == trace.FormatAuto) && otlp.LooksLikeJSON(data)) {
		return otlp.Parse(data, lim)
	}
	return trace.ParseAny(data, lim, format, fallbackID)
}

// FallbackID names a trace whose format carries no id (a chat log) after
// where it came from: traces.jsonl:7 becomes traces.jsonl-7.
func FallbackID(source string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '/', '\\', ':', ' ', 0:
			return '-'
		}
		return r
	}, source)
}

// Service is the ingest stage.
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

// Handle is the stage: a raw document in, its canonical trace out on
// troy.trace.<run>, or its rejection (every problem) on troy.rejected.<run>.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	in := m.Metadata
	subject := in.Get(bus.MetaSubject)
	run := bus.RunOf(subject)
	if !bus.ValidRun(run) {
		return nil, bus.Permanentf("subject %q has no valid run token (want troy.ingest.<run>)", subject)
	}
	source := in.Get(bus.HeaderSource)
	// A document sent with no source names that place on the stream, so
	// two id-less documents that are rejected stay two rejections (the
	// key, and so the message id, would be the run's alone).
	where := source
	if where == "" {
		where = subject + "#" + in.Get(bus.MetaSequence)
	}
	policyHash := in.Get(bus.HeaderPolicy)
	output := func(stage, key string, body []byte) []*message.Message {
		meta := bus.ForwardMetadata(in, "")
		meta.Set(bus.HeaderRun, run)
		meta.Set(bus.HeaderKey, key)
		return []*message.Message{bus.OutputWith(stage, meta, policyHash, body)}
	}

	tr, err := Parse(m.Payload, s.cfg.Limits, in.Get(bus.HeaderFormat), FallbackID(source))
	var invalid *trace.InvalidError
	if errors.As(err, &invalid) {
		key := bus.Key(run, where, "")
		if source == "" && invalid.TraceID != "" {
			key = bus.Key(run, "", invalid.TraceID)
		}
		body, _ := events.Marshal(events.Rejected{Source: where, TraceID: invalid.TraceID, Problems: invalid.Problems})
		s.deps.Log.Info().Str("run", run).Str("source", source).Str("trace_id", invalid.TraceID).
			Int("problems", len(invalid.Problems)).Msg("trace rejected")
		return output(bus.StageRejected, key, body), nil
	}
	if err != nil {
		return nil, bus.Permanent(err)
	}
	body, err := events.Marshal(tr)
	if err != nil {
		return nil, bus.Permanent(fmt.Errorf("encode trace %s: %w", tr.TraceID, err))
	}
	return output(bus.StageTrace, bus.Key(run, source, tr.TraceID), body), nil
}
