// Package streamer is the service that audits traces while they arrive step
// by step on troy.ingest.<start|step|end>.<partition>.<trace_id>: it reports
// each violation the moment it is certain (pkg/stream), and when a trace
// ends (its end message, or an idle timeout) sends it whole down the
// pipeline for its report.
//
// Traces are partitioned: each partition's consumer delivers one message
// at a time, in order, to the one streamer process pinned to it. That
// process keeps the partition's open traces in memory, so a step costs the
// same however long its trace. The durable state is the step log itself
// (TROY_STEPS, kept until the trace ends): a process that takes over a
// partition rebuilds a trace from it, replaying what its predecessor
// already acknowledged without publishing it again.
package streamer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
)

// Consumer is the partitioned durable consumer this service reads.
const Consumer = pipelines.ConsumerStreamer

// Bucket records streamed traces that were started with metadata, and
// those that ended (so a late step is refused).
const Bucket = pipelines.BucketStreams

// Produces lists the stages this service publishes to.
var Produces = []string{bus.StageViolations, bus.StageIngest}

// Consumes lists the subjects this service reads: every kind of message of
// the traces of partition {p}, on the consumer of that partition.
var Consumes = []string{"troy.ingest.*.{p}.>"}

// Config tunes the service.
type Config struct {
	IdleTimeout   time.Duration // a trace with no message for this long ends
	Limits        stream.Limits
	StepLimits    trace.Limits
	DefaultPolicy string // id or hash, when the trace's first message names none
	Version       string
	Now           func() time.Time
	Registerer    prometheus.Registerer // streamer metrics; nil: none
	// Member, when Of > 0, makes this process member Index (1-based) of Of:
	// it reads only the partitions p with p % Of == Index-1, so Of
	// processes share the load. Several processes with the same Index
	// stand by for each other. Zero reads every partition.
	Member Member
}

// Member is one share of the partitions.
type Member struct{ Index, Of int }

// ParseMember reads "i/n" (e.g. 2/3).
func ParseMember(s string) (Member, error) {
	var m Member
	if s == "" {
		return m, nil
	}
	if _, err := fmt.Sscanf(s, "%d/%d", &m.Index, &m.Of); err != nil || m.Of < 1 || m.Index < 1 || m.Index > m.Of {
		return Member{}, fmt.Errorf("stream member %q: want i/n with 1 <= i <= n, e.g. 1/2 and 2/2 for two processes sharing the partitions", s)
	}
	return m, nil
}

// Reads reports whether the member reads partition p.
func (m Member) Reads(p int) bool { return m.Of == 0 || p%m.Of == m.Index-1 }

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config {
	return Config{IdleTimeout: 5 * time.Minute, Limits: stream.DefaultLimits(), StepLimits: trace.DefaultLimits(), Now: time.Now}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.IdleTimeout <= 0 || c.Now == nil {
		return errors.New("streamer: idle timeout and clock are required")
	}
	if c.Member.Of < 0 || (c.Member.Of > 0 && (c.Member.Index < 1 || c.Member.Index > c.Member.Of)) {
		return fmt.Errorf("streamer: member %d/%d: want 1 <= index <= of", c.Member.Index, c.Member.Of)
	}
	return nil
}

// Service is the streamer.
type Service struct {
	deps     bus.Deps
	cfg      Config
	kv       jetstream.KeyValue
	log      jetstream.Stream // TROY_STEPS
	policies *policystore.Store
	parts    []*partition
	metrics  metrics
}

// partition is the open traces of one partition this process reads.
type partition struct {
	mu     sync.Mutex
	traces map[string]*open
	// lastDelivery is the consumer sequence of the last message this
	// process took from the partition: a gap means another process held
	// the partition meanwhile, and what is in memory is stale.
	lastDelivery uint64
	// The log is purged below the first message of the oldest open trace
	// (one purge now and then, not one per trace: a purge scans the span
	// of the trace's messages, which interleave with all others). That
	// needs every open trace of the partition: those in memory, and, once
	// this process took the partition over, the census of those with
	// messages in the log it has not seen yet (their first sequence).
	census   map[string]*uncounted
	counted  bool   // the census is done: the partition may be purged
	lastSeq  uint64 // last stream sequence handled here
	purgedTo uint64 // the log below this is purged
}

// uncounted is an open trace of the partition that is not in memory: found
// by the census, or let go of to be rebuilt from the log when next seen.
type uncounted struct {
	first    uint64    // stream sequence of its first message: the log is kept from there
	seen     time.Time // since when it is known to be quiet
	lastSeq  uint64    // no message of it came after this one
	endAsked bool
}

type open struct {
	*stream.Trace
	firstSeq   uint64 // stream sequence of its first message
	lastSeq    uint64 // stream sequence of its last message applied
	endAsked   bool   // the idle sweep has sent its end
	ending     bool   // its end is handled; released once what it produced is stored
	policy     *policy.Engine
	closedWhy  string // set when it closed over its limits
	overLimits bool
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
	log, err := deps.JS.Stream(ctx, pipelines.StreamSteps)
	if err != nil {
		return nil, fmt.Errorf("streamer: stream %s: %w (was the topology provisioned?)", pipelines.StreamSteps, err)
	}
	c, ok := deps.Topology.Consumer(Consumer)
	if !ok || c.Partitions < 1 {
		return nil, fmt.Errorf("streamer: pipelines/topology.yaml has no partitioned consumer %q", Consumer)
	}
	store, err := policystore.Open(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	store.SetDefault(cfg.DefaultPolicy)
	s := &Service{deps: deps, cfg: cfg, kv: kv, log: log, policies: store, metrics: newMetrics(cfg.Registerer)}
	for range c.Partitions {
		s.parts = append(s.parts, &partition{traces: map[string]*open{}})
	}
	return s, nil
}

// Run reads every partition it is pinned to, ends idle traces and purges
// ended ones' log, until ctx ends; it returns once its timers have stopped.
func (s *Service) Run(ctx context.Context) error {
	if err := s.policies.Watch(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var timers sync.WaitGroup
	defer timers.Wait()
	defer cancel() // the router may stop on its own (its consumer gone)
	timers.Go(func() { s.sweep(ctx) })
	timers.Go(func() {
		t := time.NewTicker(purgeEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.purge(ctx)
			}
		}
	})
	return bus.RunRouterStage(ctx, s.deps, Consumer, 1, s.Handle, bus.WithPublisher(s.releaseAfter), bus.WithPartitions(s.cfg.Member.Reads))
}

// purgeEvery is how often ended traces' messages leave the log.
const purgeEvery = 2 * time.Second

// Key of a streamed trace: its findings' uids and its final report's
// message ids derive from it, as for any trace in the live run.
func Key(traceID string) string { return bus.Key(bus.LiveRun, traceID, traceID) }

// metaRelease, on the message that ends a trace, names the trace to let go
// of (partition|id) once everything its end produced is stored: until then
// it holds back the purge of its log, from which a redelivered end is
// replayed.
const metaRelease = "_release"

// Handle is the stage: one start, steps or end message of a trace in; the
// findings that became certain (and, at the end, the whole trace for its
// report) out. It runs one message at a time per partition.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	ctx := m.Context()
	subject := m.Metadata.Get(bus.MetaSubject)
	kind, p, id, ok := bus.ParseStreamSubject(subject)
	switch {
	case !ok:
		return nil, bus.Permanentf("subject %q is not troy.ingest.<start|step|end>.<partition>.<trace_id>", subject)
	case p >= len(s.parts):
		return nil, bus.Permanentf("subject %q: partition %d is not one of the %d in pipelines/topology.yaml", subject, p, len(s.parts))
	case !bus.ValidTraceToken(id):
		return nil, bus.Permanentf("subject %q: a trace id must be UTF-8 text of at most %d bytes, without '/', '\\', spaces, wildcards or control characters", subject, trace.MaxIDBytes)
	case bus.Partition(id, len(s.parts)) != p:
		return nil, bus.Permanentf("subject %q: trace %s belongs to partition %d (publish with bus.StreamSubject)", subject, id, bus.Partition(id, len(s.parts)))
	}
	seq, _ := strconv.ParseUint(m.Metadata.Get(bus.MetaSequence), 10, 64)
	delivery, _ := strconv.ParseUint(m.Metadata.Get(bus.MetaConsumerSeq), 10, 64)
	part := s.parts[p]
	part.mu.Lock()
	defer part.mu.Unlock()
	switch {
	case delivery == part.lastDelivery && delivery != 0:
		// the same delivery again: watermill's Retry after a failed attempt
	case part.lastDelivery == 0 || delivery != part.lastDelivery+1:
		// This process just took the partition (or another took its
		// messages in between): what is in memory may be stale. Each trace
		// is rebuilt when next seen; the census says which are open.
		if part.lastDelivery != 0 {
			s.metrics.takeovers.Inc()
		}
		clear(part.traces)
		part.census, part.counted = s.census(ctx, p, seq)
	}
	part.lastDelivery = delivery
	part.lastSeq = max(part.lastSeq, seq)
	tr := part.traces[id]
	if tr != nil && tr.lastSeq >= seq {
		// a redelivery of a message already applied (its ack or its outputs
		// were lost): start again from the log
		s.forget(part, id, tr)
		tr = nil
	}
	if tr == nil {
		c, inCensus := part.census[id]
		var err error
		if tr, err = s.load(ctx, id, kind, seq, part.counted && !inCensus); err != nil {
			return nil, err
		}
		if tr != nil {
			part.traces[id] = tr
			if inCensus {
				tr.firstSeq = min(tr.firstSeq, c.first)
			}
		}
		delete(part.census, id)
	}
	out, closed, err := s.apply(ctx, tr, id, kind, m.Payload, m.Metadata, seq, true)
	if err != nil {
		if tr != nil {
			s.forget(part, id, tr) // maybe half applied: rebuilt from the log on the next try
		}
		return nil, err
	}
	if tr == nil && out.tr != nil {
		tr = out.tr
		tr.firstSeq = seq
		part.traces[id] = tr
	}
	if tr != nil {
		tr.lastSeq = max(tr.lastSeq, seq)
	}
	if closed && tr != nil {
		if len(out.msgs) == 0 {
			delete(part.traces, id) // nothing to store first
		} else {
			tr.ending = true
			out.msgs[len(out.msgs)-1].Metadata.Set(metaRelease, strconv.Itoa(p)+"|"+id)
		}
	}
	return out.msgs, nil
}

// forget drops a trace from memory but keeps it counted: its log stays
// (the purge floor), and it is rebuilt from the log when next seen.
func (s *Service) forget(part *partition, id string, tr *open) {
	delete(part.traces, id)
	if part.census == nil {
		part.census = map[string]*uncounted{}
	}
	part.census[id] = &uncounted{first: tr.firstSeq, seen: tr.LastSeen, lastSeq: tr.lastSeq}
}

// release lets go of a trace whose end's outputs are stored.
func (s *Service) release(spec string) {
	ps, id, ok := strings.Cut(spec, "|")
	p, err := strconv.Atoi(ps)
	if !ok || err != nil || p < 0 || p >= len(s.parts) {
		return
	}
	part := s.parts[p]
	part.mu.Lock()
	defer part.mu.Unlock()
	if tr := part.traces[id]; tr != nil && tr.ending {
		delete(part.traces, id)
	}
}

// census lists the traces of partition p with messages in the log before
// seq that have not ended: the open traces this process must account for
// before it purges the partition's log. ok is false when it could not
// tell (then the partition is not purged until the next takeover).
func (s *Service) census(ctx context.Context, p int, seq uint64) (map[string]*uncounted, bool) {
	out := map[string]*uncounted{}
	info, err := s.log.Info(ctx, jetstream.WithSubjectFilter("troy.ingest.*."+strconv.Itoa(p)+".>"))
	if err != nil {
		s.deps.Log.Warn().Err(err).Int("partition", p).Msg("streamer: no census of the partition; its log is not purged")
		return out, false
	}
	ids := map[string]bool{}
	for subject := range info.State.Subjects {
		if _, _, id, ok := bus.ParseStreamSubject(subject); ok {
			ids[id] = true
		}
	}
	now := s.cfg.Now()
	for id := range ids {
		first, err := s.log.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(logFilter(len(s.parts), id)))
		if err != nil || first.Sequence >= seq {
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return out, false
			}
			continue
		}
		// Ended before seq: with one message in flight at a time, its end
		// and what the end produced were stored before seq was delivered.
		if entry, err := s.kv.Get(ctx, stream.EndedKey(id)); err == nil {
			var stone stream.Tombstone
			if json.Unmarshal(entry.Value(), &stone) == nil && stone.EndSeq < seq {
				continue
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return out, false
		}
		out[id] = &uncounted{first: first.Sequence, seen: now, lastSeq: seq - 1}
	}
	return out, true
}

// purge removes, partition by partition, the log below the first message
// of the oldest trace still open there.
func (s *Service) purge(ctx context.Context) {
	for p, part := range s.parts {
		part.mu.Lock()
		floor := part.lastSeq // the last message may be unacked (retried, redelivered): it stays
		for _, tr := range part.traces {
			floor = min(floor, tr.firstSeq)
		}
		for _, c := range part.census {
			floor = min(floor, c.first)
		}
		do := part.counted && part.lastSeq > 0 && floor > part.purgedTo+1
		part.mu.Unlock()
		if !do {
			continue
		}
		if err := s.log.Purge(ctx, jetstream.WithPurgeSubject("troy.ingest.*."+strconv.Itoa(p)+".>"), jetstream.WithPurgeSequence(floor)); err != nil {
			s.deps.Log.Warn().Err(err).Int("partition", p).Msg("streamer: could not purge the log; trying again")
			continue
		}
		part.mu.Lock()
		part.purgedTo = max(part.purgedTo, floor-1)
		part.mu.Unlock()
	}
}

type applied struct {
	msgs []*message.Message
	tr   *open // a trace this message opened
}

// apply applies one message to a trace (nil: not open yet). live is false
// while a trace is rebuilt from its log: what those messages produced was
// published before, so only the state is kept.
func (s *Service) apply(ctx context.Context, tr *open, id, kind string, body []byte, meta message.Metadata, seq uint64, live bool) (applied, bool, error) {
	var res applied
	now := s.cfg.Now()
	if tr != nil && tr.overLimits && kind != bus.StreamEnd {
		return res, false, bus.Permanentf("trace %s was closed over its streaming limits (%s): start a new trace id", id, tr.closedWhy)
	}
	switch kind {
	case bus.StreamStart:
		var st stream.Start
		if err := json.Unmarshal(body, &st); err != nil {
			return res, false, bus.Permanentf("trace %s: start body must be {\"agent_name\": …, \"metadata\": {…}}: %v", id, err)
		}
		if tr != nil {
			return res, false, bus.Permanentf("trace %s was already started: a start must be its first message", id)
		}
		e, err := s.engine(ctx, id, meta.Get(bus.HeaderPolicy))
		if err != nil {
			return res, false, err
		}
		res.tr = &open{Trace: stream.New(id, st.AgentName, st.Metadata, true, e.Hash(), now), policy: e, lastSeq: seq}
		return res, false, nil

	case bus.StreamStep:
		steps, err := trace.ParseSteps(body, s.cfg.StepLimits)
		if err != nil {
			return res, false, bus.Permanent(fmt.Errorf("trace %s: %w", id, err))
		}
		if tr == nil {
			e, err := s.engine(ctx, id, meta.Get(bus.HeaderPolicy))
			if err != nil {
				return res, false, err
			}
			tr = &open{Trace: stream.New(id, meta.Get(bus.HeaderAgent), nil, false, e.Hash(), now), policy: e}
			res.tr = tr
		}
		tr.lastSeq, tr.endAsked = seq, false // a step: not idle any more
		from, err := tr.Add(steps, seq, len(body), s.cfg.Limits, now)
		if errors.Is(err, stream.ErrLimit) {
			// Over its limits: closed now, with what it has, and the reason
			// in its metadata; later messages are refused with it.
			tr.overLimits, tr.closedWhy = true, err.Error()
			if live {
				s.deps.Log.Warn().Str("trace_id", id).Err(err).Msg("streamed trace closed")
			}
			msgs, err := s.finish(ctx, tr, seq, stream.Start{}, err.Error(), live)
			res.msgs = msgs
			return res, err == nil, err // closed: what follows is refused by its tombstone
		}
		if err != nil {
			return res, false, bus.Permanent(err)
		}
		vs := tr.Decide(tr.policy, from)
		if live {
			s.metrics.steps.Add(float64(len(steps)))
			if tr.Reordered > 0 && from < len(tr.Steps)-len(steps) {
				s.metrics.reordered.Inc()
			}
			if res.msgs, err = s.findings(tr, vs); err != nil {
				return res, false, err
			}
		}
		return res, false, nil

	case bus.StreamEnd:
		var st stream.Start
		if len(body) > 0 {
			if err := json.Unmarshal(body, &st); err != nil {
				return res, false, bus.Permanentf("trace %s: end body must be empty or {\"agent_name\": …, \"metadata\": {…}}: %v", id, err)
			}
		}
		if after := meta.Get(HeaderIdleAfter); after != "" && tr != nil {
			if n, err := strconv.ParseUint(after, 10, 64); err == nil && tr.lastSeq > n {
				return res, false, nil // it had messages since it looked idle: it stays open
			}
		}
		if tr == nil {
			return res, true, nil // nothing open: an idle sweep's end for a trace closed meanwhile
		}
		if len(tr.Steps) == 0 {
			// started, never stepped: it ends with nothing to report, and
			// what comes after is refused like after any end
			if live {
				stone, _ := json.Marshal(stream.Tombstone{EndSeq: seq, Why: "ended with no steps", At: s.cfg.Now().UTC()})
				if _, err := s.kv.Put(ctx, stream.EndedKey(tr.ID), stone); err != nil {
					return res, false, fmt.Errorf("streamer: record the end of %s: %w", tr.ID, err)
				}
			}
			return res, true, nil
		}
		if tr.overLimits {
			return res, true, nil // already finished when it closed
		}
		why := st.Reason
		if why == "" {
			why = "ended by its sender"
		}
		msgs, err := s.finish(ctx, tr, seq, st, why, live)
		res.msgs = msgs
		return res, err == nil, err
	}
	return res, false, bus.Permanentf("trace %s: unknown message kind %q", id, kind)
}

// finish ends a trace: the rules decided at the end run, their findings go
// out, the trace is recorded as ended, and the whole trace goes down the
// pipeline for its report. Its log is purged once all of that is stored.
func (s *Service) finish(ctx context.Context, tr *open, seq uint64, end stream.Start, why string, live bool) ([]*message.Message, error) {
	vs := tr.Finish(tr.policy, end.AgentName, end.Metadata)
	if !live {
		return nil, nil
	}
	msgs, err := s.findings(tr, vs)
	if err != nil {
		return nil, err
	}
	stone, _ := json.Marshal(stream.Tombstone{EndSeq: seq, Why: why, At: s.cfg.Now().UTC()})
	if _, err := s.kv.Put(ctx, stream.EndedKey(tr.ID), stone); err != nil {
		return nil, fmt.Errorf("streamer: record the end of %s: %w", tr.ID, err)
	}
	body, err := json.Marshal(trace.Trace{TraceID: tr.ID, AgentName: tr.Agent, Steps: tr.Steps, Metadata: withReason(tr.Metadata, why)})
	if err != nil {
		return nil, bus.Permanent(err)
	}
	meta := message.Metadata{}
	meta.Set(bus.HeaderRun, bus.LiveRun)
	meta.Set(bus.HeaderSource, tr.ID)
	meta.Set(bus.HeaderKey, Key(tr.ID))
	meta.Set(bus.HeaderPolicy, tr.PolicyHash)
	meta.Set(bus.HeaderStreamed, "1")
	whole := bus.OutputWith(bus.StageIngest, meta, tr.PolicyHash, body)
	s.metrics.ended.Inc()
	return append(msgs, whole), nil
}

func (s *Service) findings(tr *open, vs []policy.Violation) ([]*message.Message, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	s.metrics.findings.Add(float64(len(vs)))
	c := ocsf.Context{Trace: tr.Trace.Trace(), PolicyID: tr.policy.Policy().PolicyID, PolicyHash: tr.PolicyHash, Run: bus.LiveRun,
		Product: s.cfg.Version, Now: s.cfg.Now()}
	return ocsf.Messages(Key(tr.ID), vs, c)
}

func (s *Service) engine(ctx context.Context, id, ref string) (*policy.Engine, error) {
	e, err := s.policies.Engine(ctx, ref)
	switch {
	case errors.Is(err, policystore.ErrNotFound) || errors.Is(err, policy.ErrInvalid):
		return nil, bus.Permanent(fmt.Errorf("trace %s: %w", id, err))
	case err != nil: // the store could not be read: try again
		return nil, fmt.Errorf("trace %s: %w", id, err)
	}
	return e, nil
}

// logFilter matches every message of a trace in the log.
func logFilter(partitions int, id string) string {
	return "troy.ingest.*." + strconv.Itoa(bus.Partition(id, partitions)) + "." + id
}

// load finds a trace this process does not hold: new (its first message is
// this one), ended (this message came after its end), or held by another
// process before (rebuilt from its log, up to this message).
func (s *Service) load(ctx context.Context, id, kind string, seq uint64, known bool) (*open, error) {
	if entry, err := s.kv.Get(ctx, stream.EndedKey(id)); err == nil {
		var stone stream.Tombstone
		if json.Unmarshal(entry.Value(), &stone) == nil && stone.EndSeq < seq {
			if kind == bus.StreamEnd {
				return nil, nil // a second end (e.g. the idle sweep's) after the first: nothing to do
			}
			return nil, bus.Permanentf("trace %s ended (%s, at %s): send its steps under a new trace id", id, stone.Why, stone.At.Format(time.RFC3339))
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("streamer: read the state of %s: %w", id, err)
	}
	if known {
		return nil, nil // the census says it has no earlier message: a new trace
	}
	filter := logFilter(len(s.parts), id)
	first, err := s.log.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("streamer: read the log of %s: %w", id, err)
	}
	if first == nil || first.Sequence >= seq {
		return nil, nil // a new trace
	}
	return s.rebuild(ctx, id, filter, seq)
}

// rebuild replays a trace's earlier messages (those before seq) into a
// fresh state, publishing nothing: they were handled and acknowledged.
func (s *Service) rebuild(ctx context.Context, id, filter string, seq uint64) (*open, error) {
	started := time.Now()
	cons, err := s.deps.JS.OrderedConsumer(ctx, pipelines.StreamSteps, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, fmt.Errorf("streamer: replay %s: %w", id, err)
	}
	var tr *open
	var firstSeq uint64
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("streamer: replay %s: %w", id, err)
		}
		n := 0
		for jm := range batch.Messages() {
			n++
			md, err := jm.Metadata()
			if err != nil {
				return nil, fmt.Errorf("streamer: replay %s: %w", id, err)
			}
			if md.Sequence.Stream >= seq {
				if tr != nil {
					tr.firstSeq = firstSeq
				}
				s.metrics.rebuilds.Inc()
				s.deps.Log.Info().Str("trace_id", id).Int("steps", stepsOf(tr)).Dur("took", time.Since(started)).Msg("streamer: trace rebuilt from its log")
				return tr, nil
			}
			if firstSeq == 0 {
				firstSeq = md.Sequence.Stream
			}
			kind, _, _, _ := bus.ParseStreamSubject(jm.Subject())
			mmeta := message.Metadata{}
			for k, v := range jm.Headers() {
				if len(v) > 0 {
					mmeta.Set(k, v[0])
				}
			}
			res, closed, err := s.apply(ctx, tr, id, kind, jm.Data(), mmeta, md.Sequence.Stream, false)
			if err != nil {
				continue // it failed when it came, and was dead-lettered then
			}
			if res.tr != nil {
				tr = res.tr
			}
			if closed {
				tr = nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("streamer: replay %s: %w", id, err)
		}
		if n == 0 { // the log ends before seq (purged meanwhile): what was read stands
			if tr != nil {
				tr.firstSeq = firstSeq
			}
			return tr, nil
		}
	}
}

func stepsOf(tr *open) int {
	if tr == nil {
		return 0
	}
	return len(tr.Steps)
}

func withReason(meta map[string]any, why string) map[string]any {
	out := map[string]any{}
	for k, v := range meta {
		out[k] = v
	}
	out["stream_end"] = why
	return out
}

// releaseAfter wraps the publisher: once a trace's end outputs are stored,
// the trace is let go of (and so is its log, at the next purge).
func (s *Service) releaseAfter(pub message.Publisher) message.Publisher {
	return releasingPublisher{Publisher: pub, s: s}
}

type releasingPublisher struct {
	message.Publisher
	s *Service
}

func (p releasingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		if spec := m.Metadata.Get(metaRelease); spec != "" {
			p.s.release(spec)
		}
	}
	return nil
}

// sweep ends the traces this process holds that have been idle for longer
// than the idle timeout, by sending their end through their partition, in
// order after anything still on its way.
func (s *Service) sweep(ctx context.Context) {
	every := min(max(s.cfg.IdleTimeout/4, 50*time.Millisecond), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	type idleTrace struct {
		id      string
		lastSeq uint64
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.cfg.Now()
		var idle []idleTrace
		for _, part := range s.parts {
			part.mu.Lock()
			for id, tr := range part.traces {
				if !tr.endAsked && !tr.ending && now.Sub(tr.LastSeen) >= s.cfg.IdleTimeout {
					tr.endAsked = true
					idle = append(idle, idleTrace{id, tr.lastSeq})
				}
			}
			// open traces not in memory: found by a takeover's census, or
			// let go of after a failure; quiet since then
			for id, c := range part.census {
				if !c.endAsked && now.Sub(c.seen) >= s.cfg.IdleTimeout {
					c.endAsked = true
					idle = append(idle, idleTrace{id, c.lastSeq})
				}
			}
			part.mu.Unlock()
		}
		for _, it := range idle {
			body, _ := json.Marshal(stream.Start{Reason: fmt.Sprintf("idle for %s", s.cfg.IdleTimeout)})
			m := nats.NewMsg(bus.StreamSubject(bus.StreamEnd, it.id, len(s.parts)))
			m.Data = body
			// An idle end only ends the trace as this process last saw it:
			// one that got messages since (another process held the
			// partition meanwhile) stays open.
			m.Header.Set(HeaderIdleAfter, strconv.FormatUint(it.lastSeq, 10))
			if _, err := s.deps.JS.PublishMsg(ctx, m); err != nil {
				s.deps.Log.Warn().Err(err).Str("trace_id", it.id).Msg("streamer: could not end an idle trace; trying again")
				s.unask(it.id)
			}
		}
	}
}

func (s *Service) unask(id string) {
	part := s.parts[bus.Partition(id, len(s.parts))]
	part.mu.Lock()
	defer part.mu.Unlock()
	if tr := part.traces[id]; tr != nil {
		tr.endAsked = false
	}
	if c := part.census[id]; c != nil {
		c.endAsked = false
	}
}

// HeaderIdleAfter, on an idle end, is the stream sequence of the trace's
// last message as the sweeping process saw it.
const HeaderIdleAfter = "Troy-Idle-After"

// Open returns how many traces this process holds open, and their steps.
func (s *Service) Open() (traces, steps int) {
	for _, part := range s.parts {
		part.mu.Lock()
		for _, tr := range part.traces {
			traces++
			steps += len(tr.Steps)
		}
		part.mu.Unlock()
	}
	return traces, steps
}
