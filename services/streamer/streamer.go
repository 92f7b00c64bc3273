// Package streamer is the service that audits traces while they arrive step
// by step (troy.ingest.step.<trace_id>), reports each violation the moment
// it is certain (pkg/stream), and when a trace ends (troy.ingest.end.<id>,
// or an idle timeout) sends it whole down the pipeline for its report.
package streamer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the durable consumer this service reads.
const Consumer = pipelines.ConsumerStreamer

// Bucket keeps open traces.
const Bucket = pipelines.BucketStreams

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageViolations, bus.StageIngest}

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.StepPrefix + ">", bus.EndPrefix + ">"}

// Config tunes the service.
type Config struct {
	Workers       int
	IdleTimeout   time.Duration // a trace with no step for this long ends
	Limits        stream.Limits
	StepLimits    trace.Limits
	DefaultPolicy string        // id or hash, when neither the step nor the trace names one
	EndGrace      time.Duration // how long after an end steps still in flight are taken
	Version       string
	Now           func() time.Time
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config {
	return Config{Workers: 8, IdleTimeout: 5 * time.Minute, EndGrace: 500 * time.Millisecond,
		Limits: stream.DefaultLimits(), StepLimits: trace.DefaultLimits(), Now: time.Now}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 || c.IdleTimeout <= 0 || c.Now == nil {
		return errors.New("streamer: workers, idle timeout and clock are required")
	}
	return nil
}

// Service is the streamer.
type Service struct {
	deps     bus.Deps
	cfg      Config
	kv       jetstream.KeyValue
	policies *policystore.Store
}

// New builds the service.
func New(ctx context.Context, deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := deps.JS.KeyValue(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("streamer: bucket %s: %w (was the topology provisioned?)", Bucket, err)
	}
	store, err := policystore.Open(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	store.SetDefault(cfg.DefaultPolicy)
	return &Service{deps: deps, cfg: cfg, kv: kv, policies: store}, nil
}

// Run consumes steps and ends, and closes idle traces, until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := s.policies.Watch(ctx); err != nil {
		return err
	}
	go s.sweep(ctx)
	return bus.RunStage(ctx, s.deps, Consumer, s.cfg.Workers, s.handle)
}

// Key of a streamed trace: its findings' uids and its final report's
// message ids derive from it, as for any trace in the live run.
func Key(traceID string) string { return bus.Key(bus.LiveRun, traceID, traceID) }

func kvKey(traceID string) string { return base64.RawURLEncoding.EncodeToString([]byte(traceID)) }

func (s *Service) handle(ctx context.Context, m jetstream.Msg) error {
	subj := m.Subject()
	id, isStep := strings.CutPrefix(subj, bus.StepPrefix)
	isEnd := false
	if !isStep {
		id, isEnd = strings.CutPrefix(subj, bus.EndPrefix)
	}
	switch {
	case !isStep && !isEnd:
		return bus.Permanentf("streamer does not read %s", subj)
	case !bus.ValidTraceToken(id):
		return bus.Permanentf("subject %q: a trace id must be UTF-8 text of at most %d bytes, without '/', '\\', spaces, wildcards or control characters", subj, trace.MaxIDBytes)
	case isStep:
		return s.steps(ctx, id, m)
	}
	return s.requestEnd(ctx, id)
}

func (s *Service) steps(ctx context.Context, traceID string, m jetstream.Msg) error {
	steps, err := trace.ParseSteps(m.Data(), s.cfg.StepLimits)
	if err != nil {
		return bus.Permanent(fmt.Errorf("trace %s: %w", traceID, err))
	}
	h := m.Headers()
	return s.update(ctx, traceID, func(st *stream.State) (bool, error) {
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		from, err := st.Add(steps, seq, len(m.Data()), s.cfg.Limits, s.cfg.Now())
		if errors.Is(err, stream.ErrLimit) {
			s.deps.Log.Warn().Str("trace_id", traceID).Err(err).Msg("streamed trace closed")
			st.Closing = true
			return true, s.finish(ctx, st, err.Error())
		}
		if err != nil {
			return false, err
		}
		e, err := s.policies.ByHash(ctx, st.PolicyHash)
		if err != nil {
			return false, bus.Permanent(err)
		}
		return true, s.publish(ctx, st, e, st.Decide(e, from))
	}, func() (*stream.State, error) {
		e, err := s.policies.Engine(ctx, h.Get(bus.HeaderPolicy))
		if err != nil {
			return nil, bus.Permanent(fmt.Errorf("trace %s: %w", traceID, err))
		}
		return stream.New(traceID, h.Get(bus.HeaderAgent), nil, e.Hash(), s.cfg.Now()), nil
	})
}

// update applies fn to the trace's stored state under a revision check, so
// two workers (or processes) never overwrite each other's steps. An unknown
// trace is made by create, or left alone when create is nil; a closing
// state is purged instead of stored.
func (s *Service) update(ctx context.Context, traceID string, fn func(*stream.State) (bool, error), create func() (*stream.State, error)) error {
	return bus.UpdateKV(ctx, s.kv, kvKey(traceID), func(cur []byte) ([]byte, bus.KVChange, error) {
		var st *stream.State
		switch {
		case cur == nil && create == nil:
			return nil, bus.KVKeep, nil
		case cur == nil:
			var err error
			if st, err = create(); err != nil {
				return nil, bus.KVKeep, err
			}
		default:
			st = &stream.State{}
			if err := json.Unmarshal(cur, st); err != nil {
				return nil, bus.KVKeep, bus.Permanent(fmt.Errorf("stored state of %s: %w", traceID, err))
			}
		}
		if st.Closing {
			return nil, bus.KVKeep, bus.Permanentf("trace %s has ended: start a new trace id", traceID)
		}
		changed, err := fn(st)
		switch {
		case err != nil || !changed:
			return nil, bus.KVKeep, err
		case st.Closing:
			return nil, bus.KVPurge, nil
		}
		data, err := json.Marshal(st)
		if err != nil {
			return nil, bus.KVKeep, bus.Permanent(err)
		}
		return data, bus.KVWrite, nil
	})
}

// requestEnd marks a trace as complete and closes it after a short grace:
// steps sent just before the end may be handled by another worker, or
// another process, a moment later.
func (s *Service) requestEnd(ctx context.Context, traceID string) error {
	err := s.update(ctx, traceID, func(st *stream.State) (bool, error) {
		if !st.EndAt.IsZero() {
			return false, nil
		}
		st.EndAt, st.EndWhy = s.cfg.Now(), "ended by its sender"
		return true, nil
	}, nil)
	if err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	time.AfterFunc(s.cfg.EndGrace, func() {
		if err := s.end(bg, traceID, "ended by its sender"); err != nil {
			s.deps.Log.Warn().Err(err).Str("trace_id", traceID).Msg("streamer: could not end a trace; the sweep will")
		}
	})
	return nil
}

// end closes a trace: the rules decided at the end run, their findings go
// out, and the whole trace goes down the pipeline for its report.
func (s *Service) end(ctx context.Context, traceID, why string) error {
	return s.update(ctx, traceID, func(st *stream.State) (bool, error) {
		if len(st.Steps) == 0 {
			return false, nil // nothing was streamed: nothing to end
		}
		st.Closing = true
		return true, s.finish(ctx, st, why)
	}, nil)
}

func (s *Service) finish(ctx context.Context, st *stream.State, why string) error {
	e, err := s.policies.ByHash(ctx, st.PolicyHash)
	if err != nil {
		return bus.Permanent(err)
	}
	if err := s.publish(ctx, st, e, st.Finish(e)); err != nil {
		return err
	}
	doc := map[string]any{"trace_id": st.TraceID, "agent_name": st.Agent, "steps": st.Steps,
		"metadata": withReason(st.Metadata, why)}
	body, err := json.Marshal(doc)
	if err != nil {
		return bus.Permanent(err)
	}
	h := nats.Header{}
	h.Set(bus.HeaderSource, st.TraceID)
	h.Set(bus.HeaderKey, Key(st.TraceID))
	h.Set(bus.HeaderPolicy, st.PolicyHash)
	h.Set(bus.HeaderStreamed, "1")
	return bus.Publish(ctx, s.deps.JS, bus.Out{Subject: bus.Subject(bus.StageIngest, bus.LiveRun), Data: body, Header: h,
		MsgID: bus.MsgID(bus.StageIngest, Key(st.TraceID), st.PolicyHash)})
}

func withReason(meta map[string]any, why string) map[string]any {
	out := map[string]any{}
	for k, v := range meta {
		out[k] = v
	}
	out["stream_end"] = why
	return out
}

// publish sends findings before the state that records them is written, so
// none is lost if the write fails; a retry after a lost revision race may
// send one again, and its uid as Nats-Msg-Id lets JetStream drop the copy.
func (s *Service) publish(ctx context.Context, st *stream.State, e *policy.Engine, vs []policy.Violation) error {
	if len(vs) == 0 {
		return nil
	}
	c := ocsf.Context{Trace: st.Trace(), PolicyID: e.Policy().PolicyID, PolicyHash: st.PolicyHash, Run: bus.LiveRun,
		Product: s.cfg.Version, Now: s.cfg.Now()}
	return ocsf.Publish(ctx, s.deps.JS, Key(st.TraceID), vs, c)
}

// sweep ends traces idle for longer than the idle timeout, and ended ones
// whose closing was lost (the process that took the end stopped).
func (s *Service) sweep(ctx context.Context) {
	every := min(max(s.cfg.IdleTimeout/4, 100*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lister, err := s.kv.ListKeys(ctx)
		if err != nil {
			continue
		}
		for key := range lister.Keys() {
			entry, err := s.kv.Get(ctx, key)
			if err != nil {
				continue
			}
			var st stream.State
			if json.Unmarshal(entry.Value(), &st) != nil {
				continue
			}
			why := ""
			switch now := s.cfg.Now(); {
			case !st.EndAt.IsZero() && now.Sub(st.EndAt) >= s.cfg.EndGrace:
				why = st.EndWhy
			case now.Sub(st.LastSeen) >= s.cfg.IdleTimeout:
				why = fmt.Sprintf("idle for %s", s.cfg.IdleTimeout)
			default:
				continue
			}
			if err := s.end(ctx, st.TraceID, why); err != nil {
				s.deps.Log.Warn().Err(err).Str("trace_id", st.TraceID).Msg("streamer: could not end an idle trace")
			}
		}
	}
}
