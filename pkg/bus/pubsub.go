package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
)

// Metadata keys the transport sets on a received message besides its
// headers. They start with "_" and are never sent as headers.
const (
	MetaSubject    = "_subject"    // the subject it arrived on (troy.<stage>.<run>)
	MetaDeliveries = "_deliveries" // how many times JetStream has delivered it
	MetaSequence   = "_sequence"   // its sequence in its stream
	// MetaConsumerSeq is its delivery's sequence in its consumer: a gap
	// means another client took deliveries in between.
	MetaConsumerSeq = "_consumer_sequence"
	// MetaPublishTo, on an outgoing message, overrides the topic it is
	// published to (a stage that writes to several subjects).
	MetaPublishTo = "_publish_to"
)

// Subscriber is a watermill Subscriber over JetStream durable pull
// consumers: Subscribe's topic is a consumer name from the topology. Each
// message is acked when the router acks it (after its outputs are stored),
// nacked with a delay when it is nacked, and kept alive (InProgress) while
// the handler runs. At most Workers messages are in flight.
type Subscriber struct {
	JS       jetstream.JetStream
	Topology *pipelines.Topology
	Workers  int
	// RetryDelay is the redelivery delay after a nack (default 500ms).
	RetryDelay time.Duration

	wg  sync.WaitGroup
	mu  sync.Mutex
	err error // why a subscription stopped on its own
}

// Subscribe implements message.Subscriber.
func (s *Subscriber) Subscribe(ctx context.Context, consumer string) (<-chan *message.Message, error) {
	c, ok := s.Topology.Consumer(consumer)
	if !ok {
		return nil, fmt.Errorf("subscribe %s: no consumer of that name in pipelines/topology.yaml", consumer)
	}
	cons, err := s.JS.Consumer(ctx, c.Stream, consumer)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: consumer on %s: %w (was the topology provisioned?)", consumer, c.Stream, err)
	}
	workers := max(s.Workers, 1)
	// Pulling only `workers` messages at a time, a 2,000-trace batch sat
	// idle for ~30 s (the default pull expiry) in about one run in three,
	// every consumer waiting with messages pending: not understood yet.
	// With 2×workers none was seen in 24 runs; the 5 s expiry bounds such a
	// pause if it comes back.
	opts := []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(2 * workers), jetstream.PullExpiry(5 * time.Second)}
	if c.Pinned {
		// pull again well within the pin's TTL, or another client is pinned
		opts = []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(2 * workers), jetstream.PullExpiry(PinnedTTL / 3),
			jetstream.PullPriorityGroup(pipelines.PriorityGroup)}
	}
	it, err := cons.Messages(opts...)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", consumer, err)
	}
	keepAlive := max(s.Topology.ConsumerDefaults.AckWait.Duration/3, 100*time.Millisecond)
	retry := s.RetryDelay
	if retry <= 0 {
		retry = 500 * time.Millisecond
	}
	out := make(chan *message.Message)
	in := make(chan jetstream.Msg)
	var workersWG sync.WaitGroup
	s.wg.Add(1)
	go func() { // one reader: the iterator is read from one goroutine
		defer s.wg.Done()
		defer close(in)
		for {
			m, err := it.Next()
			switch {
			case err == nil:
			case errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil:
				return
			case errors.Is(err, jetstream.ErrNoHeartbeat):
				continue // the iterator pulls again
			default: // the consumer is gone, or the connection: the stage stops, and says why
				s.fail(fmt.Errorf("subscribe %s: %w", consumer, err))
				return
			}
			select {
			case in <- m:
			case <-ctx.Done():
				return // unacked: redelivered after the ack wait
			}
		}
	}()
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	for range workers {
		workersWG.Go(func() {
			for jm := range in {
				s.deliver(ctx, jm, out, keepAlive, retry)
			}
		})
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		workersWG.Wait()
		close(out)
	}()
	return out, nil
}

// deliver hands one message to the router and settles it as the router
// does.
func (s *Subscriber) deliver(ctx context.Context, jm jetstream.Msg, out chan<- *message.Message, keepAlive, retry time.Duration) {
	msg := ToMessage(jm)
	msg.SetContext(ctx)
	select {
	case out <- msg:
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-msg.Acked():
			_ = jm.Ack()
			return
		case <-msg.Nacked():
			_ = jm.NakWithDelay(retry)
			return
		case <-tick.C:
			_ = jm.InProgress()
		case <-ctx.Done():
			return // redelivered after the ack wait
		}
	}
}

// Close implements message.Subscriber: it waits for the subscriptions,
// which end when their context does, and returns why one failed.
func (s *Subscriber) Close() error {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscriber) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// ToMessage turns a JetStream message into a watermill one: its id is the
// Nats-Msg-Id (or the stream and sequence), its headers its metadata.
func ToMessage(jm jetstream.Msg) *message.Message {
	h := jm.Headers()
	id := h.Get(HeaderMsgID)
	md, mdErr := jm.Metadata()
	if id == "" && mdErr == nil {
		id = md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	msg := message.NewMessage(id, jm.Data())
	for k, v := range h {
		if len(v) > 0 && k != HeaderMsgID {
			msg.Metadata.Set(k, v[0])
		}
	}
	msg.Metadata.Set(MetaSubject, jm.Subject())
	if mdErr == nil {
		msg.Metadata.Set(MetaDeliveries, strconv.FormatUint(md.NumDelivered, 10))
		msg.Metadata.Set(MetaSequence, strconv.FormatUint(md.Sequence.Stream, 10))
		msg.Metadata.Set(MetaConsumerSeq, strconv.FormatUint(md.Sequence.Consumer, 10))
	}
	return msg
}

// Publisher is a watermill Publisher over JetStream: every message is
// published asynchronously with its UUID as Nats-Msg-Id (so a republished
// output is stored once), and Publish returns once all are stored.
type Publisher struct {
	JS jetstream.JetStream
	// Timeout bounds waiting for the acks of one Publish (default 10s).
	Timeout time.Duration
}

// Publish implements message.Publisher. The topic is the subject, unless a
// message's MetaPublishTo names another.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		subject := topic
		if to := m.Metadata.Get(MetaPublishTo); to != "" {
			subject = to
		}
		if err := checkSubject(subject); err != nil {
			return err
		}
		nm := nats.NewMsg(subject)
		nm.Data = m.Payload
		for k, v := range m.Metadata {
			if len(k) > 0 && k[0] != '_' {
				nm.Header.Set(k, v)
			}
		}
		nm.Header.Set(HeaderMsgID, m.UUID)
		f, err := p.JS.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish %s: %w", subject, err)
		}
		futures = append(futures, f)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-deadline.C:
			return fmt.Errorf("publish %s: no ack within %s", f.Msg().Subject, timeout)
		}
	}
	return nil
}

// Close implements message.Publisher.
func (p *Publisher) Close() error { return nil }
