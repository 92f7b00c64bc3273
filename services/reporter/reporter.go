// Package reporter is the service that joins each trace's score with its
// explanations and publishes the finished audit. Join state lives in a KV
// bucket, so a restart between the two halves loses nothing.
package reporter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/report"
)

// Consumer is the durable consumer this service reads (troy.score.>, troy.explain.>).
const Consumer = pipelines.ConsumerReporter

// JoinBucket holds the half of each trace that arrived first.
const JoinBucket = pipelines.BucketJoin

// markerTTL is how long a finished join's purge marker lives; nothing
// watches the bucket, so the shortest the server allows.
const markerTTL = time.Second

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageReport}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageScore), bus.Wildcard(bus.StageExplain)}

// Config tunes the service.
type Config struct {
	Workers int
	// Dir, when set, also receives <run>/<trace_id>/report.md and audit.json.
	Dir string
	// Modes are the permissions of report files and folders in Dir.
	Modes report.Modes
	Now   func() time.Time
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 8, Modes: report.DefaultModes, Now: time.Now} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("reporter: workers must be at least 1, got %d", c.Workers)
	}
	if c.Now == nil {
		return errors.New("reporter: no clock")
	}
	if c.Dir != "" && (c.Modes.File == 0 || c.Modes.Dir == 0) {
		return errors.New("reporter: report file modes are unset: start from DefaultConfig")
	}
	return nil
}

// Service is the reporter stage.
type Service struct {
	deps bus.Deps
	cfg  Config
	join jetstream.KeyValue
}

// New builds the service.
func New(ctx context.Context, deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := deps.JS.KeyValue(ctx, JoinBucket)
	if err != nil {
		return nil, fmt.Errorf("reporter: bucket %s: %w (was the topology provisioned?)", JoinBucket, err)
	}
	return &Service{deps: deps, cfg: cfg, join: kv}, nil
}

// Run consumes until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	return bus.RunStage(ctx, s.deps, Consumer, s.cfg.Workers, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) error {
	stage, run := stageOf(m.Subject()), bus.RunOf(m.Subject())
	if !bus.ValidRun(run) {
		return bus.Permanentf("subject %q has no valid run token (want troy.<stage>.<run>)", m.Subject())
	}
	var sc *events.Scored
	var ex *events.Explained
	var err error
	var traceID, other string
	switch stage {
	case bus.StageScore:
		if sc, err = events.Decode[events.Scored](m.Data()); err != nil {
			return bus.Permanent(err)
		}
		traceID, other = sc.TraceID, bus.StageExplain
	case bus.StageExplain:
		if ex, err = events.Decode[events.Explained](m.Data()); err != nil {
			return bus.Permanent(err)
		}
		traceID, other = ex.Trace.TraceID, bus.StageScore
	default:
		return bus.Permanentf("reporter does not read %s", m.Subject())
	}
	key := bus.KeyOf(m, traceID)
	if _, err := s.join.Put(ctx, key+"."+stage, m.Data()); err != nil {
		return fmt.Errorf("reporter: store %s half of %s: %w", stage, traceID, err)
	}
	entry, err := s.join.Get(ctx, key+"."+other)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // the other half completes the join
	}
	if err != nil {
		return fmt.Errorf("reporter: read %s half of %s: %w", other, traceID, err)
	}
	// The stored half was validated before it was stored.
	if sc == nil {
		sc, err = events.Decode[events.Scored](entry.Value())
	} else {
		ex, err = events.Decode[events.Explained](entry.Value())
	}
	if err != nil {
		return bus.Permanent(fmt.Errorf("stored %s half of %s: %w", other, traceID, err))
	}
	if sc.TraceID != ex.Trace.TraceID {
		return bus.Permanentf("join mismatch under key %s: score of %s, explanation of %s", key, sc.TraceID, ex.Trace.TraceID)
	}
	if err := s.publish(ctx, m, run, key, s.assemble(sc, ex), ex.Explanation.Responses); err != nil {
		return err
	}
	// The purge markers expire within seconds, so finished joins leave
	// nothing behind; a failed purge only costs space until the bucket's TTL.
	_ = s.join.Purge(ctx, key+"."+bus.StageScore, jetstream.PurgeTTL(markerTTL))
	_ = s.join.Purge(ctx, key+"."+bus.StageExplain, jetstream.PurgeTTL(markerTTL))
	return nil
}

func (s *Service) assemble(sc *events.Scored, ex *events.Explained) *report.Audit {
	return &report.Audit{
		SchemaVersion:     report.SchemaVersion,
		Trace:             ex.Trace,
		PolicyID:          sc.PolicyID,
		PolicyHash:        sc.PolicyHash,
		Graph:             ex.Graph,
		ExplanationSource: ex.Explanation.Source,
		Summary:           ex.Explanation.Summary,
		Explanations:      ex.Explanation.Steps,
		Violations:        sc.Violations,
		RuleErrors:        sc.RuleErrors,
		RiskScore:         sc.RiskScore,
		SeverityCounts:    sc.SeverityCounts,
		LLMUsage:          ex.Explanation.Usage,
		Warnings:          ex.Explanation.Warnings,
		GeneratedAt:       s.cfg.Now().UTC(),
	}
}

func (s *Service) publish(ctx context.Context, m jetstream.Msg, run, key string, a *report.Audit, responses map[string]string) error {
	md := report.Markdown(a)
	if s.cfg.Dir != "" {
		dir, err := report.TraceDir(s.cfg.Dir, s.cfg.Modes, run, a.Trace.TraceID)
		if err != nil {
			return bus.Permanent(err)
		}
		if err := report.WriteAudit(dir, a, md, s.cfg.Modes); err != nil {
			return err
		}
		if err := report.WriteResponses(dir, responses, s.cfg.Modes); err != nil {
			return err
		}
	}
	body, err := events.Marshal(events.Reported{Audit: a, Markdown: string(md), Responses: responses})
	if err != nil {
		return bus.Permanent(err)
	}
	out := bus.Forward(m.Headers(), m, a.Trace.TraceID)
	out.Set(bus.HeaderPolicy, a.PolicyHash)
	events.SetSummary(out, events.SummaryOf(a))
	return bus.Publish(ctx, s.deps.JS, bus.Out{Subject: bus.Subject(bus.StageReport, run), Data: body,
		Header: out, MsgID: bus.MsgID(bus.StageReport, key, a.PolicyHash)})
}

// stageOf returns the <stage> of troy.<stage>.<run>.
func stageOf(subject string) string {
	const prefix = "troy."
	if len(subject) <= len(prefix) {
		return ""
	}
	rest := subject[len(prefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i]
		}
	}
	return rest
}
