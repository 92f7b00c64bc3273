package auditor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/report"
)

// Streams the auditor reads (pipelines/topology.yaml): reports and
// rejections, and dead letters, which end an input that will never be reported.
const (
	OutcomesStream   = pipelines.StreamOutcomes
	DeadLetterStream = pipelines.StreamDlq
)

// Outcome is the end of one input: a finished report or a rejection.
type Outcome struct {
	Entry     report.Entry
	Audit     json.RawMessage // audit.json, compact; nil when rejected
	Markdown  []byte
	Responses map[string]string // raw LLM answers by file name, when an LLM explained the trace
}

// Sink receives each outcome as it arrives, e.g. to write report files; an
// error stops the run. Reports come from one goroutine; a dead-lettered
// input's rejection may come from another, so a sink must be safe for that.
type Sink func(Outcome) error

// Config describes one submission.
type Config struct {
	Run         string         // run token; NewRun makes one
	Policy      *policy.Engine // stored in the policy bucket before any trace is sent
	Window      int            // most inputs in the pipeline at once
	IdleTimeout time.Duration  // give up after this long without any outcome
	Progress    func(done, total int)
	Format      string // input format: auto (default), troy, messages
	// Finished are inputs an interrupted attempt of this run already
	// finished (its journal); they are neither sent nor reported again.
	Finished []report.Entry
}

// followOpts are the ordered consumers' pulls: a short heartbeat, so one
// whose server went away (a cluster losing a node) is noticed within
// seconds and recreated from the last outcome read, instead of half a
// minute of silence.
var followOpts = []jetstream.PullMessagesOpt{jetstream.PullExpiry(5 * time.Second), jetstream.PullHeartbeat(time.Second)}

// purgeEvery is how many outcomes the collector handles before it purges
// them from the stream: once the sink has them, the stream need not.
const purgeEvery = 256

// Validate checks the configuration.
func (c Config) Validate() error {
	if !bus.ValidRun(c.Run) {
		return fmt.Errorf("auditor: run %q is not a valid token", c.Run)
	}
	if c.Policy == nil {
		return errors.New("auditor: a policy is required")
	}
	if c.Window < 1 {
		return fmt.Errorf("auditor: window must be at least 1, got %d", c.Window)
	}
	return nil
}

// NewRun returns a fresh random run token.
func NewRun() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ErrStalled is returned when no outcome arrived within the idle timeout.
var ErrStalled = errors.New("pipeline stalled")

// Submit sends every input to troy.ingest.<run> and returns one entry per
// input, in input order, once each has a report or a rejection. Outcomes
// already on the stream for this run (from an interrupted attempt) count, and
// their inputs are not sent again.
func Submit(ctx context.Context, js jetstream.JetStream, cfg Config, inputs iter.Seq[Input], total int, sink Sink) ([]report.Entry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := policystore.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	if _, err := store.Ensure(ctx, cfg.Policy.Policy(), false); err != nil {
		return nil, err
	}
	outcomes, err := js.Stream(ctx, OutcomesStream)
	if err != nil {
		return nil, fmt.Errorf("auditor: stream %s: %w (was the topology provisioned?)", OutcomesStream, err)
	}
	c := &collector{
		js:       js,
		outcomes: outcomes,
		cfg:      cfg,
		sink:     sink,
		total:    total,
		done:     map[string][]byte{},
		inflight: map[string]bool{},
		slots:    make(chan struct{}, cfg.Window),
		byTrace:  map[string]string{},
		changed:  make(chan struct{}, 1),
	}
	for _, e := range cfg.Finished {
		c.done[e.Source] = encodeEntry(e)
		if e.Status == report.StatusAudited {
			c.byTrace[e.TraceID] = e.Source
		}
	}
	// On every way out, the readers below are stopped (their iterators,
	// then ctx) and waited for: the sink is never called after Submit
	// returns.
	var readers sync.WaitGroup
	defer readers.Wait()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Outcomes already stored for this run (an interrupted attempt) are read
	// first, so a resumed run does not resend what is finished.
	stored, err := storedOutcomes(ctx, js, cfg.Run)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, OutcomesStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.Subject(bus.StageReport, cfg.Run), bus.Subject(bus.StageRejected, cfg.Run)},
	})
	if err != nil {
		return nil, fmt.Errorf("auditor: read outcomes: %w", err)
	}
	iterMsgs, err := cons.Messages(followOpts...)
	if err != nil {
		return nil, fmt.Errorf("auditor: read outcomes: %w", err)
	}
	defer iterMsgs.Stop()
	for range stored {
		m, err := iterMsgs.Next()
		if err != nil {
			return nil, fmt.Errorf("auditor: replay outcomes: %w", err)
		}
		if err := c.receive(ctx, m); err != nil {
			return nil, err
		}
	}
	dead, err := js.OrderedConsumer(ctx, DeadLetterStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.Subject(bus.StageDLQ, "*") + "." + cfg.Run},
	})
	if err != nil {
		return nil, fmt.Errorf("auditor: read dead letters: %w", err)
	}
	deadMsgs, err := dead.Messages(followOpts...)
	if err != nil {
		return nil, fmt.Errorf("auditor: read dead letters: %w", err)
	}
	defer deadMsgs.Stop()
	readers.Go(func() {
		for {
			m, err := deadMsgs.Next()
			if err != nil {
				return
			}
			if err := c.deadLetter(m); err != nil {
				cancel(err)
				return
			}
		}
	})
	collectErr := make(chan error, 1)
	readers.Go(func() {
		for {
			m, err := iterMsgs.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					collectErr <- nil
				} else {
					collectErr <- err
				}
				return
			}
			if err := c.receive(ctx, m); err != nil {
				collectErr <- err
				cancel(err)
				return
			}
		}
	})

	var order []string
	for in := range inputs {
		order = append(order, in.Source)
		if in.Err != nil {
			problem := "could not read: " + in.Err.Error()
			if errors.Is(in.Err, ErrTooLarge) {
				problem = in.Err.Error()
			}
			if err := c.finish(report.Entry{Source: in.Source, Status: report.StatusRejected,
				Problems: []string{problem}}, Outcome{}); err != nil {
				return nil, err
			}
			continue
		}
		if !c.claim(in.Source) {
			continue // finished by an earlier attempt
		}
		if err := c.acquire(ctx); err != nil {
			return nil, c.stopErr(ctx, err)
		}
		if err := publish(ctx, js, cfg, in); errors.Is(err, nats.ErrMaxPayload) {
			// too large for one message: this input is rejected, the batch goes on
			if err := c.finish(report.Entry{Source: in.Source, Status: report.StatusRejected, Problems: []string{fmt.Sprintf(
				"%d bytes, over the NATS server's %d-byte message limit: split the trace, or raise max_payload on the server", len(in.Data), js.Conn().MaxPayload())}}, Outcome{}); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
	}
	if err := c.wait(ctx, order); err != nil {
		return nil, c.stopErr(ctx, err)
	}
	iterMsgs.Stop()
	if err := <-collectErr; err != nil {
		return nil, err
	}
	return c.entries(order), nil
}

func publish(ctx context.Context, js jetstream.JetStream, cfg Config, in Input) error {
	h := nats.Header{}
	h.Set(bus.HeaderSource, in.Source)
	h.Set(bus.HeaderPolicy, cfg.Policy.Hash())
	if cfg.Format != "" {
		h.Set(bus.HeaderFormat, cfg.Format)
	}
	key := bus.Key(cfg.Run, in.Source, "")
	h.Set(bus.HeaderKey, key)
	return bus.Publish(ctx, js, bus.Out{Subject: bus.Subject(bus.StageIngest, cfg.Run), Data: in.Data, Header: h,
		MsgID: bus.MsgID(bus.StageIngest, key, cfg.Policy.Hash())})
}

type collector struct {
	js       jetstream.JetStream
	outcomes jetstream.Stream
	handled  int    // outcomes since the last purge
	lastSeq  uint64 // stream sequence of the last outcome handled
	cfg      Config
	sink     Sink
	total    int

	mu sync.Mutex
	// done holds each finished input's entry, encoded: the struct with its
	// severity map took ~1 KB an input, a batch of 100k a hundred MB.
	done     map[string][]byte // by source
	inflight map[string]bool   // sent, waiting for an outcome
	byTrace  map[string]string // trace id -> first source reported with it
	slots    chan struct{}
	changed  chan struct{}
}

func (c *collector) stopErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// claim marks a source as sent; false when it already has an outcome.
func (c *collector) claim(source string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.done[source]; ok {
		return false
	}
	c.inflight[source] = true
	return true
}

func (c *collector) acquire(ctx context.Context) error {
	timer := time.NewTimer(c.idle())
	defer timer.Stop()
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return c.stalled()
	}
}

func (c *collector) idle() time.Duration {
	if c.cfg.IdleTimeout > 0 {
		return c.cfg.IdleTimeout
	}
	return 5 * time.Minute
}

func (c *collector) stalled() error {
	// The likeliest cause the services cannot tell the client: a store
	// with no room left for their outputs. A probe with no source, on the
	// dead-letter stream, says (and is passed over by every reader).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.js.Publish(ctx, bus.Subject(bus.StageDLQ, "probe")+"."+c.cfg.Run, nil)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == bus.ErrCodeInsufficientResources {
		return fmt.Errorf("%w: no report or rejection for %s: the JetStream store is full (insufficient resources): free space or raise its limit; the services retry what they could not store",
			ErrStalled, c.idle())
	}
	return fmt.Errorf("%w: no report or rejection for %s; are troy's services running against this NATS server (troy serve)? see troy.dlq.> for dead letters", ErrStalled, c.idle())
}

// receive handles one outcome message, then purges handled outcomes from the
// stream now and then so a long batch does not keep them all.
func (c *collector) receive(ctx context.Context, m jetstream.Msg) error {
	if err := c.handle(m); err != nil {
		return err
	}
	if md, err := m.Metadata(); err == nil {
		c.lastSeq = md.Sequence.Stream
	}
	if c.handled++; c.handled >= purgeEvery {
		c.handled = 0
		// Best effort: what is not purged now is purged at the end or expires.
		_ = c.outcomes.Purge(ctx, jetstream.WithPurgeSubject("troy.*."+c.cfg.Run), jetstream.WithPurgeSequence(c.lastSeq+1))
	}
	return nil
}

// deadLetter ends an input that a stage gave up on: it will never be reported.
func (c *collector) deadLetter(m jetstream.Msg) error {
	h := m.Headers()
	source := strings.Clone(h.Get(bus.HeaderSource)) // a header value pins its whole header block
	if source == "" {
		return nil
	}
	c.mu.Lock()
	_, sent := c.inflight[source]
	c.mu.Unlock()
	if !sent {
		return nil // from an earlier attempt; this one may yet succeed
	}
	return c.finish(report.Entry{Source: source, Status: report.StatusRejected, Problems: []string{
		fmt.Sprintf("the %s stage gave up on it: %s (dead letter on %s)", h.Get(bus.HeaderStage), h.Get(bus.HeaderReason), m.Subject())}}, Outcome{})
}

func (c *collector) handle(m jetstream.Msg) error {
	// Header values are substrings of their message's header block: what
	// is kept for every input (map keys, entries) is cloned, or each would
	// pin its block (~0.5 KB an input over a 100k batch).
	source := strings.Clone(m.Headers().Get(bus.HeaderSource))
	if bus.RunOf(m.Subject()) != c.cfg.Run || source == "" {
		return nil // not one of ours
	}
	if m.Subject() == bus.Subject(bus.StageRejected, c.cfg.Run) {
		rej, err := events.Decode[events.Rejected](m.Data())
		if err != nil {
			return c.finish(report.Entry{Source: source, Status: report.StatusRejected, Problems: []string{err.Error()}}, Outcome{})
		}
		probs := make([]string, len(rej.Problems))
		for i, p := range rej.Problems {
			probs[i] = p.String()
		}
		return c.finish(report.Entry{Source: source, TraceID: rej.TraceID, Status: report.StatusRejected, Problems: probs}, Outcome{})
	}
	malformed := report.Entry{Source: source, Status: report.StatusRejected,
		Problems: []string{"the pipeline returned a malformed report; see troy.dlq.> and the service logs"}}
	sum, err := events.GetSummary(m.Headers())
	if err != nil {
		return c.finish(malformed, Outcome{})
	}
	var rep struct {
		Audit     json.RawMessage   `json:"audit"`
		Markdown  string            `json:"markdown"`
		Responses map[string]string `json:"responses"`
	}
	if err := events.Unmarshal(m.Data(), &rep); err != nil || len(rep.Audit) == 0 {
		return c.finish(malformed, Outcome{})
	}
	e := report.Entry{Source: source, TraceID: sum.TraceID, Steps: sum.Steps, Status: report.StatusAudited,
		SeverityCounts: sum.SeverityCounts, RiskScore: sum.RiskScore, LLM: sum.LLM, RuleErrors: sum.RuleErrors}
	return c.finish(e, Outcome{Audit: rep.Audit, Markdown: []byte(rep.Markdown), Responses: rep.Responses})
}

func (c *collector) finish(e report.Entry, o Outcome) error {
	c.mu.Lock()
	if _, dup := c.done[e.Source]; dup {
		c.mu.Unlock()
		return nil // a redelivered outcome: the first one stands
	}
	if e.Status == report.StatusAudited {
		if other, clash := c.byTrace[e.TraceID]; clash && other != e.Source {
			e = report.Entry{Source: e.Source, TraceID: e.TraceID, Status: report.StatusRejected,
				Problems: []string{fmt.Sprintf("trace_id %q is also used by %s: trace ids must be unique in a batch", e.TraceID, other)}}
			o = Outcome{}
		} else {
			c.byTrace[e.TraceID] = e.Source
		}
	}
	c.done[e.Source] = encodeEntry(e)
	wasInflight := c.inflight[e.Source]
	delete(c.inflight, e.Source)
	n := len(c.done)
	c.mu.Unlock()

	if c.sink != nil {
		o.Entry = e
		if err := c.sink(o); err != nil {
			return err
		}
	}
	if wasInflight {
		<-c.slots
	}
	if c.cfg.Progress != nil {
		c.cfg.Progress(n, c.total)
	}
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

// wait blocks until every source in order has an outcome.
func (c *collector) wait(ctx context.Context, order []string) error {
	timer := time.NewTimer(c.idle())
	defer timer.Stop()
	next := 0 // order[:next] are done: each check goes on from there, not from the start
	for {
		c.mu.Lock()
		for next < len(order) {
			if _, ok := c.done[order[next]]; !ok {
				break
			}
			next++
		}
		c.mu.Unlock()
		if next == len(order) {
			return nil
		}
		select {
		case <-c.changed:
			timer.Reset(c.idle())
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return c.stalled()
		}
	}
}

func (c *collector) entries(order []string) []report.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]report.Entry, 0, len(order))
	seen := map[string]bool{}
	for _, s := range order {
		if seen[s] {
			continue
		}
		seen[s] = true
		var e report.Entry
		if err := json.Unmarshal(c.done[s], &e); err != nil {
			e = report.Entry{Source: s, Status: report.StatusRejected, Problems: []string{"troy lost this input's outcome: " + err.Error()}}
		}
		out = append(out, e)
	}
	return out
}

// encodeEntry is an entry as done keeps it.
func encodeEntry(e report.Entry) []byte {
	b, err := json.Marshal(e)
	if err != nil { // strings, numbers and a map: not expected, but never a crash
		b, _ = json.Marshal(report.Entry{Source: e.Source, TraceID: e.TraceID, Status: report.StatusRejected,
			Problems: []string{"troy could not record this input's outcome: " + err.Error()}})
	}
	return b
}

func storedOutcomes(ctx context.Context, js jetstream.JetStream, run string) (uint64, error) {
	s, err := js.Stream(ctx, OutcomesStream)
	if err != nil {
		return 0, fmt.Errorf("auditor: stream %s: %w (was the topology provisioned?)", OutcomesStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("troy.*."+run))
	if err != nil {
		return 0, fmt.Errorf("auditor: stream %s: %w", OutcomesStream, err)
	}
	var n uint64
	for _, count := range info.State.Subjects {
		n += count
	}
	return n, nil
}

// Forget purges a finished run's outcomes from the stream.
//
// A client whose NATS user may not purge (the audit role: clients purge
// nothing) leaves them to the stream's max age: that is not an error.
// Bounded at 5 s.
func Forget(ctx context.Context, js jetstream.JetStream, run string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, OutcomesStream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject("troy.*."+run))
	}
	if err = bus.Refused(js.Conn(), err, "$JS.API.STREAM."); bus.IsPermissionDenied(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge %s outcomes: %w", run, err)
	}
	return nil
}
