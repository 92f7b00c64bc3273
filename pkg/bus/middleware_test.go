package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// fixture is a stream with one consumer and a dead-letter stream.
func fixture(t *testing.T, maxDeliver int) (*bustest.Server, jetstream.Consumer) {
	t.Helper()
	s := bustest.RunServer(t)
	ctx := context.Background()
	_, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"troy.in.>"}})
	require.NoError(t, err)
	_, err = s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"troy.dlq.>"}})
	require.NoError(t, err)
	c, err := s.JS.CreateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: maxDeliver, AckWait: 5 * time.Second})
	require.NoError(t, err)
	return s, c
}

func consume(t *testing.T, c jetstream.Consumer, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c, h, bus.ConsumeConfig{Workers: 2, RetryDelay: time.Millisecond, Log: zerolog.Nop()})
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
}

func deadLetters(t *testing.T, s *bustest.Server) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 16)
	sub, err := s.NC.ChanSubscribe("troy.dlq.>", ch)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, s.NC.Flush())
	return ch
}

func pub(t *testing.T, s *bustest.Server, data string) {
	t.Helper()
	_, err := s.JS.Publish(context.Background(), "troy.in.r", []byte(data))
	require.NoError(t, err)
}

func recv(t *testing.T, ch chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return nil
	}
}

func TestDeadLetterPermanentErrorsAtOnce(t *testing.T) {
	s, c := fixture(t, 5)
	dlq := deadLetters(t, s)
	var calls atomic.Int32
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		return bus.Permanentf("cannot parse")
	}, bus.DeadLetter(s.JS, "stage1", 5, zerolog.Nop()))
	consume(t, c, h)
	pub(t, s, "garbage")
	m := recv(t, dlq)
	assert.Equal(t, "troy.dlq.stage1.r", m.Subject)
	assert.Equal(t, "cannot parse", m.Header.Get(bus.HeaderReason))
	assert.Equal(t, "troy.in.r", m.Header.Get(bus.HeaderOrigin))
	assert.Equal(t, "1", m.Header.Get(bus.HeaderDeliveries))
	assert.Equal(t, "garbage", string(m.Data))
	assert.Equal(t, int32(1), calls.Load(), "never redelivered")
}

func TestDeadLetterAfterLastDelivery(t *testing.T) {
	s, c := fixture(t, 3)
	dlq := deadLetters(t, s)
	var calls atomic.Int32
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		return errors.New("downstream unavailable")
	}, bus.DeadLetter(s.JS, "stage1", 3, zerolog.Nop()))
	consume(t, c, h)
	pub(t, s, "x")
	m := recv(t, dlq)
	assert.Equal(t, "gave up after 3 deliveries: downstream unavailable", m.Header.Get(bus.HeaderReason))
	assert.Equal(t, int32(3), calls.Load())
}

func TestTransientErrorsAreRetriedUntilSuccess(t *testing.T) {
	s, c := fixture(t, 5)
	dlq := deadLetters(t, s)
	done := make(chan struct{})
	var calls atomic.Int32
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		if calls.Add(1) < 3 {
			return errors.New("try again")
		}
		close(done)
		return nil
	}, bus.DeadLetter(s.JS, "stage1", 5, zerolog.Nop()))
	consume(t, c, h)
	pub(t, s, "x")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not retried to success")
	}
	require.Eventually(t, func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0
	}, 5*time.Second, 10*time.Millisecond, "acked after success")
	assert.Len(t, dlq, 0)
}

func TestRecoverTurnsPanicIntoDeadLetter(t *testing.T) {
	s, c := fixture(t, 5)
	dlq := deadLetters(t, s)
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		var m map[string]int
		m["boom"]++ // nil map write
		return nil
	}, bus.DeadLetter(s.JS, "stage1", 5, zerolog.Nop()), bus.Recover())
	consume(t, c, h)
	pub(t, s, "poison")
	m := recv(t, dlq)
	assert.True(t, strings.HasPrefix(m.Header.Get(bus.HeaderReason), "handler panicked: assignment to entry in nil map"), m.Header.Get(bus.HeaderReason))
}

func TestMetricsCountOutcomes(t *testing.T) {
	s, c := fixture(t, 5)
	dlq := deadLetters(t, s)
	reg := prometheus.NewRegistry()
	bus.NewMetrics(reg)
	mt := bus.NewMetrics(reg) // a second registration reuses the series instead of failing
	h := bus.Chain(func(_ context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "bad" {
			return bus.Permanentf("bad")
		}
		return nil
	}, mt.Observe("s"), bus.DeadLetter(s.JS, "s", 5, zerolog.Nop()))
	consume(t, c, h)
	pub(t, s, "good")
	pub(t, s, "bad")
	recv(t, dlq)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(mtCounter(t, reg, "ok")) == 1 && testutil.ToFloat64(mtCounter(t, reg, "dead_letter")) == 1
	}, 5*time.Second, 10*time.Millisecond)
}

func mtCounter(t *testing.T, reg *prometheus.Registry, outcome string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "troy_stage_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					g.Set(m.GetCounter().GetValue())
				}
			}
		}
	}
	return g
}

func TestKeepAliveHoldsALongHandlersMessage(t *testing.T) {
	s := bustest.RunServer(t)
	ctx := context.Background()
	_, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"troy.in.>"}})
	require.NoError(t, err)
	c, err := s.JS.CreateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Second})
	require.NoError(t, err)
	var calls atomic.Int32
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		time.Sleep(2500 * time.Millisecond) // a slow LLM call, past the ack wait
		return nil
	}, bus.KeepAlive(300*time.Millisecond))
	consume(t, c, h)
	pub(t, s, "x")
	require.Eventually(t, func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Consumer == 1
	}, 10*time.Second, 20*time.Millisecond, "acked once done")
	info, err := c.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.NumRedelivered, "never redelivered while in progress")
	assert.Equal(t, int32(1), calls.Load())
}

// A message whose handler never answers (the process crashed, hung, or was
// killed on every delivery) reaches the dead-letter stream on the one extra
// delivery the consumer allows, instead of vanishing when the server stops
// redelivering it.
func TestDeadLetterWhenNoDeliveryEverFinished(t *testing.T) {
	s, c := fixture(t, 3) // 2 handler attempts + 1
	dlq := deadLetters(t, s)
	pub(t, s, "poison")
	ctx := context.Background()
	for range 2 { // two deliveries that end without an answer, as a crash would
		b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		m := <-b.Messages()
		require.NotNil(t, m)
		require.NoError(t, m.Nak())
	}
	var calls atomic.Int32
	h := bus.Chain(func(context.Context, jetstream.Msg) error {
		calls.Add(1)
		return nil
	}, bus.DeadLetter(s.JS, "stage1", 2, zerolog.Nop()))
	b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	m := <-b.Messages()
	require.NotNil(t, m)
	_ = h(ctx, m)
	d := recv(t, dlq)
	assert.Contains(t, d.Header.Get(bus.HeaderReason), "no handler finished it in 2 deliveries")
	assert.Equal(t, "3", d.Header.Get(bus.HeaderDeliveries))
	assert.Equal(t, "poison", string(d.Data))
	assert.Zero(t, calls.Load(), "the handler is not tried again")
}
