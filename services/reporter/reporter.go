// Package reporter is the service that joins each trace's score with its
// explanations and publishes the finished audit. Join state lives in a KV
// bucket, so a restart between the two halves loses nothing.
package reporter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/report"
)

// Consumer is the durable consumer this service reads (troy.score.>, troy.explain.>).
const Consumer = pipelines.ConsumerReporter

// JoinBucket holds the half of each trace that arrived first.
const JoinBucket = pipelines.BucketJoin

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
	// Ledger, when set, is the ledger this process records every audit in
	// (ledger.InstanceID("reporter")), once its report is stored.
	Ledger string
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
	// joinStream is the bucket's stream, for purging a finished join.
	joinStream jetstream.Stream
	ledger     *ledger.Batcher
	// records waits for each report's publish: message UUID → its ledger
	// record.
	records sync.Map
	// recorded remembers the reports recorded lately: both halves of a
	// trace arriving at once can each complete the join, and the second,
	// identical report (deduplicated by the stream) is not recorded again.
	recorded recentSet
}

// recentSet is a bounded set of the most recent keys.
type recentSet struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

// claim adds key, false if it is there already.
func (r *recentSet) claim(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set, r.ring = map[string]struct{}{}, make([]string, 1<<16)
	}
	if _, ok := r.set[key]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.next], r.next = key, (r.next+1)%len(r.ring)
	r.set[key] = struct{}{}
	return true
}

// release forgets key (its record was not written: the redelivery writes it).
func (r *recentSet) release(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.set, key)
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
	// A finished join is removed with one purge of its keys' subjects on
	// the bucket's stream: no purge markers to store and expire (nothing
	// watches the bucket), one request instead of two.
	st, err := deps.JS.Stream(ctx, "KV_"+JoinBucket)
	if err != nil {
		return nil, fmt.Errorf("reporter: bucket %s: %w", JoinBucket, err)
	}
	s := &Service{deps: deps, cfg: cfg, join: kv, joinStream: st}
	if cfg.Ledger != "" {
		if s.ledger, err = ledger.OpenBatcher(ctx, deps.JS, cfg.Ledger, "reporter", ledger.BatcherOptions{}); err != nil {
			return nil, fmt.Errorf("reporter: decision ledger: %w", err)
		}
	}
	return s, nil
}

// Run consumes until ctx is cancelled, on watermill's router. The join's
// KV entries are purged once the report is stored (purgeAfter), never
// before: a report that failed to publish is rebuilt from them on
// redelivery.
func (s *Service) Run(ctx context.Context) error {
	err := bus.RunRouterStage(ctx, s.deps, Consumer, s.cfg.Workers, s.Handle, bus.WithPublisher(s.purgeAfter))
	return errors.Join(err, s.ledger.Shutdown(ctx))
}

// Ledger is the id of the ledger audits are recorded in ("" when off).
func (s *Service) Ledger() string { return s.ledger.Ledger() }

// metaJoin names, on the report message, the join key to purge once it is
// stored.
const metaJoin = "_join_key"

// Handle is the stage: half of a trace's result in (its score, or its
// explanation), stored in the join bucket; when the other half is there,
// the report out (files in Dir too) on troy.report.<run>.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	ctx := m.Context()
	subject := m.Metadata.Get(bus.MetaSubject)
	stage, run := stageOf(subject), bus.RunOf(subject)
	if !bus.ValidRun(run) {
		return nil, bus.Permanentf("subject %q has no valid run token (want troy.<stage>.<run>)", subject)
	}
	var sc *events.Scored
	var ex *events.Explained
	var err error
	var traceID, other string
	switch stage {
	case bus.StageScore:
		if sc, err = events.Decode[events.Scored](m.Payload); err != nil {
			return nil, bus.Permanent(err)
		}
		traceID, other = sc.TraceID, bus.StageExplain
	case bus.StageExplain:
		// Checked now, decoded in full only when the join completes: an
		// explanation carries the whole trace, and it arrives first more
		// often than not.
		if traceID, err = events.CheckExplained(m.Payload); err != nil {
			return nil, bus.Permanent(err)
		}
		other = bus.StageScore
	default:
		return nil, bus.Permanentf("reporter does not read %s", subject)
	}
	key := bus.ForwardMetadata(m.Metadata, traceID).Get(bus.HeaderKey)
	if !bus.ValidKey(key) {
		return nil, bus.Permanentf("%s header %q is not a pipeline key (20 hex digits)", bus.HeaderKey, key)
	}
	if _, err := s.join.Put(ctx, key+"."+stage, m.Payload); err != nil {
		return nil, fmt.Errorf("reporter: store %s half of %s: %w", stage, traceID, err)
	}
	// Read through the leader: a lagging replica could miss the other
	// half just stored, and both halves would wait for each other.
	otherHalf, err := bus.KVLeaderGet(ctx, s.deps.JS, JoinBucket, key+"."+other)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil // the other half completes the join
	}
	if err != nil {
		return nil, fmt.Errorf("reporter: read %s half of %s: %w", other, traceID, err)
	}
	// Both halves can get here at once, each finding the other: one
	// reports. The claim names its half, so that half's redelivery (a crash
	// before its report was stored) still reports.
	if _, err := s.join.Create(ctx, key+".claim", []byte(stage)); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("reporter: claim the report of %s: %w", traceID, err)
		}
		claim, err := bus.KVLeaderGet(ctx, s.deps.JS, JoinBucket, key+".claim")
		if err != nil {
			return nil, fmt.Errorf("reporter: read the claim on %s: %w", traceID, err)
		}
		if string(claim) != stage {
			return nil, nil // the other half reports
		}
	} else if _, err := bus.KVLeaderGet(ctx, s.deps.JS, JoinBucket, key+"."+stage); errors.Is(err, jetstream.ErrKeyNotFound) {
		// A new claim, but this half is gone: the other half reported and
		// purged the join between our read and our claim (the claim was
		// purged too, so ours succeeded). Nothing to report; leave nothing.
		if perr := s.join.Purge(ctx, key+".claim"); perr != nil {
			s.deps.Log.Warn().Err(perr).Str("trace_id", traceID).Msg("reporter: purge a late claim")
		}
		return nil, nil
	}
	// The stored half was checked before it was stored; the explanation is
	// decoded in full here, whichever half it is.
	explained := m.Payload
	if sc == nil {
		if sc, err = events.Decode[events.Scored](otherHalf); err != nil {
			return nil, bus.Permanent(fmt.Errorf("stored %s half of %s: %w", other, traceID, err))
		}
	} else {
		explained = otherHalf
	}
	if ex, err = events.Decode[events.Explained](explained); err != nil {
		return nil, bus.Permanent(fmt.Errorf("explanation of %s: %w", traceID, err))
	}
	if sc.TraceID != ex.Trace.TraceID {
		return nil, bus.Permanentf("join mismatch under key %s: score of %s, explanation of %s", key, sc.TraceID, ex.Trace.TraceID)
	}
	out, err := s.report(m.Metadata, run, s.assemble(sc, ex), ex.Explanation.Responses)
	if err != nil {
		return nil, err
	}
	out.Metadata.Set(metaJoin, key)
	return []*message.Message{out}, nil
}

// purgeAfter wraps the publisher: once a report is stored, its join's
// entries are purged. The purge markers expire within seconds, so finished
// joins leave nothing behind; a failed purge only costs space until the
// bucket's TTL.
func (s *Service) purgeAfter(pub message.Publisher) message.Publisher {
	return purgingPublisher{Publisher: pub, s: s}
}

type purgingPublisher struct {
	message.Publisher
	s *Service
}

// Publish stores the reports, then records them in the ledger (waiting
// until each record is stored) and purges their joins. A record the
// ledger does not store fails the publish, so the trace is redelivered
// rather than acknowledged unrecorded.
func (p purgingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		for _, m := range msgs {
			p.s.records.Delete(m.UUID)
		}
		return err
	}
	for _, m := range msgs {
		rec, ok := p.s.records.LoadAndDelete(m.UUID)
		if !ok || !p.s.recorded.claim(m.UUID) {
			continue
		}
		data := rec.(map[string]any)
		ctx, cancel := context.WithTimeout(m.Context(), 10*time.Second)
		err := p.s.ledger.AddWait(ctx, ledger.Entry{Kind: "audit", Data: data})
		cancel()
		if err != nil {
			p.s.recorded.release(m.UUID)
			return fmt.Errorf("reporter: record the audit of %s: %w", data["trace_id"], err)
		}
	}
	for _, m := range msgs {
		if key := m.Metadata.Get(metaJoin); key != "" {
			_ = p.s.joinStream.Purge(m.Context(), jetstream.WithPurgeSubject("$KV."+JoinBucket+"."+key+".*"))
		}
	}
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

// report renders an audit, writes its files when Dir is set, and makes
// its message for troy.report.<run>.
func (s *Service) report(in message.Metadata, run string, a *report.Audit, responses map[string]string) (*message.Message, error) {
	md := report.Markdown(a)
	var auditJSON []byte
	if s.cfg.Dir != "" || s.ledger != nil {
		var err error
		if auditJSON, err = report.MarshalAudit(a); err != nil {
			return nil, bus.Permanent(err)
		}
	}
	if s.cfg.Dir != "" {
		dir, err := report.TraceDir(s.cfg.Dir, s.cfg.Modes, run, a.Trace.TraceID)
		if err != nil {
			return nil, bus.Permanent(err)
		}
		js := auditJSON
		if err := report.WriteReport(filepath.Join(dir, report.MarkdownFile), filepath.Join(dir, report.JSONFile), js, md, responses, s.cfg.Modes); err != nil {
			return nil, err
		}
	}
	body, err := events.Marshal(events.Reported{Audit: a, Markdown: string(md), Responses: responses})
	if err != nil {
		return nil, bus.Permanent(err)
	}
	out := bus.NewOutput(bus.StageReport, in, a.Trace.TraceID, a.PolicyHash, body) // the join's key, as Handle derived it
	out.Metadata.Set(bus.HeaderPolicy, a.PolicyHash)
	h := nats.Header{}
	events.SetSummary(h, events.SummaryOf(a))
	for k := range h {
		out.Metadata.Set(k, h.Get(k))
	}
	if s.ledger != nil {
		s.records.Store(out.UUID, auditRecord(run, a, auditJSON))
	}
	return out, nil
}

// auditRecord is what the ledger keeps of an audit: which trace, judged by
// which policy version, what was found, and the hash of audit.json (of its
// canonical JSON, so the pretty-printed file checks against it).
func auditRecord(run string, a *report.Audit, auditJSON []byte) map[string]any {
	violations := make([]any, 0, len(a.Violations))
	for _, v := range a.Violations {
		violations = append(violations, map[string]any{"rule_id": v.RuleID, "step_id": v.StepID, "severity": v.Severity})
	}
	digest, err := ledger.DigestJSON(auditJSON)
	if err != nil {
		digest = "unreadable: " + err.Error()
	}
	return map[string]any{"trace_id": a.Trace.TraceID, "run": run, "agent": a.Trace.AgentName,
		"policy_id": a.PolicyID, "policy_hash": a.PolicyHash, "risk_score": a.RiskScore,
		"violations": violations, "rule_errors": len(a.RuleErrors), "audit_sha256": digest}
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
