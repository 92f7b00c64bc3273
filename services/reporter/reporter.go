// Package reporter is the service that joins each trace's score with its
// explanations and publishes the finished audit. Join state lives in a KV
// bucket, so a restart between the two halves loses nothing.
package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/report"
)

// Consumer is the durable consumer this service reads (troy.score.>, troy.explain.>).
const Consumer = "reporter"

// JoinBucket holds the half of each trace that arrived first.
const JoinBucket = "troy_join"

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageReport}

// Config tunes the service.
type Config struct {
	Workers int
	// Dir, when set, also receives <run>/<trace_id>/report.md and audit.json.
	Dir string
	Now func() time.Time
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 8, Now: time.Now} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("reporter: workers must be at least 1, got %d", c.Workers)
	}
	if c.Now == nil {
		return errors.New("reporter: no clock")
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
	var traceID, other string
	switch stage {
	case bus.StageScore:
		sc, err := events.Decode[events.Scored](m.Data())
		if err != nil {
			return bus.Permanent(err)
		}
		traceID, other = sc.TraceID, bus.StageExplain
	case bus.StageExplain:
		ex, err := events.Decode[events.Explained](m.Data())
		if err != nil {
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
	scoreData, explainData := m.Data(), entry.Value()
	if stage == bus.StageExplain {
		scoreData, explainData = explainData, scoreData
	}
	rep, err := s.assemble(scoreData, explainData)
	if err != nil {
		return bus.Permanent(err)
	}
	if err := s.publish(ctx, m, run, key, rep); err != nil {
		return err
	}
	// Leftovers expire with the bucket's TTL; a failed delete only costs space.
	_ = s.join.Delete(ctx, key+"."+bus.StageScore)
	_ = s.join.Delete(ctx, key+"."+bus.StageExplain)
	return nil
}

func (s *Service) assemble(scoreData, explainData []byte) (*events.Reported, error) {
	sc, err := events.Decode[events.Scored](scoreData)
	if err != nil {
		return nil, err
	}
	ex, err := events.Decode[events.Explained](explainData)
	if err != nil {
		return nil, err
	}
	if sc.TraceID != ex.Trace.TraceID {
		return nil, fmt.Errorf("join mismatch: score of %s, explanation of %s", sc.TraceID, ex.Trace.TraceID)
	}
	a := &report.Audit{
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
		GeneratedAt:       s.cfg.Now().UTC(),
	}
	return &events.Reported{Audit: a, Markdown: string(report.Markdown(a))}, nil
}

func (s *Service) publish(ctx context.Context, m jetstream.Msg, run, key string, rep *events.Reported) error {
	a := rep.Audit
	if s.cfg.Dir != "" {
		dir := filepath.Join(s.cfg.Dir, run, a.Trace.TraceID)
		if err := report.WriteAudit(filepath.Join(dir, report.MarkdownFile), filepath.Join(dir, report.JSONFile), a, []byte(rep.Markdown)); err != nil {
			return err
		}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return bus.Permanent(err)
	}
	out := bus.Forward(m.Headers(), m, a.Trace.TraceID)
	out.Set(bus.HeaderPolicy, a.PolicyHash)
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
