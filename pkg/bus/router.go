package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/rs/zerolog"
)

// RunRouterStage runs a pipeline stage on watermill's router: h reads the
// named durable consumer and returns the messages to publish (each with
// MetaPublishTo naming its subject). Middleware, outermost first: ours for
// metrics; watermill's PoisonQueue, which sends a Permanent error, or the
// last delivery's error, to troy.dlq.<stage>.<run> with the reason; ours
// for the delivery limit and to dead-letter what panicked; watermill's
// Recoverer (a panic is an error) and CorrelationID (the input's id follows
// every output); watermill's Retry, which retries a transient error in
// process a few times with backoff before the message is nacked (a KV or
// publish hiccup costs milliseconds, not a redelivery); and its Timeout,
// which bounds each attempt (DefaultHandlerTimeout unless WithTimeout).
func RunRouterStage(ctx context.Context, d Deps, consumer string, workers int, h message.HandlerFunc, opts ...StageOption) error {
	o := stageOptions{timeout: DefaultHandlerTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	c, ok := d.Topology.Consumer(consumer)
	if !ok {
		return fmt.Errorf("stage %s: no consumer of that name in pipelines/topology.yaml", consumer)
	}
	maxDeliver := d.Topology.ConsumerDefaults.MaxDeliver
	if c.MaxDeliver != 0 {
		maxDeliver = c.MaxDeliver
	}
	log := d.Log.With().Str("stage", consumer).Logger()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return fmt.Errorf("stage %s: %w", consumer, err)
	}
	pub := &Publisher{JS: d.JS}
	poison, err := middleware.PoisonQueueWithFilter(&deadLetters{pub: pub, stage: consumer, log: log}, "troy.dlq."+consumer,
		func(err error) bool { return IsPermanent(err) })
	if err != nil {
		return fmt.Errorf("stage %s: %w", consumer, err)
	}
	r.AddMiddleware(
		d.Metrics.observeRouter(consumer),
		poison,
		lastDelivery(maxDeliver),
		panicsArePermanent,
		middleware.Recoverer,
		middleware.CorrelationID,
		middleware.Retry{
			MaxRetries: 2, InitialInterval: 50 * time.Millisecond, Multiplier: 4, MaxInterval: time.Second,
			MaxElapsedTime: 3 * time.Second, RandomizationFactor: 0.2, ResetContextOnRetry: true,
			ShouldRetry: func(p middleware.RetryParams) bool { return !IsPermanent(p.Err) && ctx.Err() == nil },
		}.Middleware,
		middleware.Timeout(o.timeout),
	)
	if c.MaxAckPending > 0 {
		workers = min(workers, c.MaxAckPending) // the server delivers no more
	}
	sub := &Subscriber{JS: d.JS, Topology: d.Topology, Workers: workers}
	var outputs message.Publisher = pub
	if o.publisher != nil {
		outputs = o.publisher(pub)
	}
	// A partitioned consumer is one subscription, and one handler, per
	// partition; the stage keeps one name for its metrics and dead letters.
	names := d.Topology.Partitions(consumer)
	if names == nil {
		names = []string{consumer}
	} else if o.partitions != nil {
		var mine []string
		for p, name := range names {
			if o.partitions(p) {
				mine = append(mine, name)
			}
		}
		if len(mine) == 0 {
			return fmt.Errorf("stage %s: none of its %d partitions is this process's to read", consumer, len(names))
		}
		names = mine
	}
	for _, name := range names {
		r.AddHandler(name, name, sub, "", outputs, h)
	}
	log.Debug().Int("workers", workers).Msg("stage running on the router")
	if err := r.Run(ctx); err != nil {
		return fmt.Errorf("stage %s: %w", consumer, err)
	}
	return sub.Close()
}

// StageOption tunes RunRouterStage.
type StageOption func(*stageOptions)

type stageOptions struct {
	publisher  func(message.Publisher) message.Publisher
	timeout    time.Duration
	partitions func(int) bool
}

// WithPartitions limits a partitioned stage to the partitions keep
// accepts (a process that is one member of several).
func WithPartitions(keep func(p int) bool) StageOption {
	return func(o *stageOptions) { o.partitions = keep }
}

// DefaultHandlerTimeout bounds one attempt of a stage's handler. A stage
// whose work is long by nature (LLM calls) sets its own with WithTimeout.
const DefaultHandlerTimeout = time.Minute

// WithTimeout bounds each attempt of the stage's handler: its message's
// context is cancelled then, and the attempt fails (to be retried, then
// redelivered, then dead-lettered with the deadline as the reason).
func WithTimeout(d time.Duration) StageOption {
	return func(o *stageOptions) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithPublisher decorates the publisher of a stage's outputs (the reporter
// purges its join once a report is stored).
func WithPublisher(wrap func(message.Publisher) message.Publisher) StageOption {
	return func(o *stageOptions) { o.publisher = wrap }
}

// lastDelivery makes the error of a message's last allowed delivery
// Permanent (so it is dead-lettered), and dead-letters unprocessed a
// message delivered once more than that: the consumer allows one extra
// delivery (Provision), so a message whose handler crashed or hung every
// time still reaches the dead-letter stream.
func lastDelivery(maxDeliver int) message.HandlerMiddleware {
	return func(next message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			n, _ := strconv.Atoi(m.Metadata.Get(MetaDeliveries))
			if maxDeliver > 0 && n > maxDeliver {
				return nil, unfinished(maxDeliver)
			}
			out, err := next(m)
			if err != nil && !IsPermanent(err) && maxDeliver > 0 && n >= maxDeliver {
				err = Permanentf("gave up after %d deliveries: %w", n, err)
			}
			return out, err
		}
	}
}

// panicsArePermanent dead-letters a message whose handler panicked: one
// poisoned message never crashes a service, nor loops.
func panicsArePermanent(next message.HandlerFunc) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		out, err := next(m)
		var p middleware.RecoveredPanicError
		if errors.As(err, &p) {
			return nil, Permanentf("handler panicked: %v", p.V)
		}
		return out, err
	}
}

// deadLetters publishes what PoisonQueue hands it on
// troy.dlq.<stage>.<run>, with the reason and origin as headers, under a
// new message id (two stages dead-lettering one input keep two records).
type deadLetters struct {
	pub   *Publisher
	stage string
	log   zerolog.Logger
}

func (p *deadLetters) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		origin := m.Metadata.Get(MetaSubject)
		dl := message.NewMessage("dlq."+p.stage+"."+m.UUID, m.Payload)
		for k, v := range m.Metadata {
			switch k {
			case middleware.ReasonForPoisonedKey, middleware.PoisonedTopicKey, middleware.PoisonedHandlerKey, middleware.CorrelationIDMetadataKey:
			default:
				dl.Metadata.Set(k, v)
			}
		}
		reason := m.Metadata.Get(middleware.ReasonForPoisonedKey)
		dl.Metadata.Set(HeaderReason, reason)
		dl.Metadata.Set(HeaderOrigin, origin)
		dl.Metadata.Set(HeaderStage, p.stage)
		dl.Metadata.Set(HeaderDeliveries, m.Metadata.Get(MetaDeliveries))
		dl.Metadata.Set(MetaPublishTo, DeadLetterSubject(p.stage, RunOf(origin)))
		if err := p.pub.Publish("", dl); err != nil {
			return err
		}
		p.log.Warn().Str("subject", origin).Str("reason", reason).Msg("message dead-lettered")
	}
	return nil
}

func (p *deadLetters) Close() error { return nil }

// observeRouter counts each message's outcome and times its handling on
// the router (troy_stage_messages_total, troy_stage_handle_seconds).
func (mt *Metrics) observeRouter(stage string) message.HandlerMiddleware {
	ok := mt.messages.WithLabelValues(stage, "ok")
	retry := mt.messages.WithLabelValues(stage, "retry")
	dead := mt.messages.WithLabelValues(stage, "dead_letter")
	hist := mt.duration.WithLabelValues(stage)
	return func(next message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := next(m)
			hist.Observe(time.Since(start).Seconds())
			switch {
			case err != nil:
				retry.Inc()
			case m.Metadata.Get(middleware.ReasonForPoisonedKey) != "":
				dead.Inc()
			default:
				ok.Inc()
			}
			return out, err
		}
	}
}

// ForwardMetadata copies the pipeline headers (run, source, key, policy,
// streamed) of an input, filling in the run and key when a publisher left
// them out.
func ForwardMetadata(in message.Metadata, traceID string) message.Metadata {
	out := message.Metadata{}
	for _, k := range []string{HeaderRun, HeaderSource, HeaderKey, HeaderPolicy, HeaderStreamed} {
		if v := in.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	subject := in.Get(MetaSubject)
	if out.Get(HeaderRun) == "" {
		out.Set(HeaderRun, RunOf(subject))
	}
	if out.Get(HeaderKey) == "" {
		out.Set(HeaderKey, Key(RunOf(subject), in.Get(HeaderSource), traceID))
	}
	return out
}

// NewOutput is a stage's output for one input: its id (and so its
// Nats-Msg-Id) is derived from the input's key, the stage and the policy,
// so a redelivered input's output is stored once; it carries the input's
// pipeline headers and goes to troy.<stage>.<run>.
func NewOutput(stage string, in message.Metadata, traceID, policyHash string, body []byte) *message.Message {
	return OutputWith(stage, ForwardMetadata(in, traceID), policyHash, body)
}

// OutputWith is NewOutput for a stage that sets the run and key headers
// itself (ingest, which names the input).
func OutputWith(stage string, meta message.Metadata, policyHash string, body []byte) *message.Message {
	out := message.NewMessage(MsgID(stage, meta.Get(HeaderKey), policyHash), body)
	out.Metadata = meta
	out.Metadata.Set(MetaPublishTo, Subject(stage, meta.Get(HeaderRun)))
	return out
}
