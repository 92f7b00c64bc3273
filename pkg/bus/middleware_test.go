package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// The stage middleware, as every pipeline stage runs it: RunRouterStage on
// the graph consumer (troy.trace.<run> in, dead letters on
// troy.dlq.graph.<run>), against a real JetStream server.

// runStage runs h as the graph stage until the test ends.
func runStage(t *testing.T, deps bus.Deps, h message.HandlerFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.RunRouterStage(ctx, deps, pipelines.ConsumerGraph, 2, h) }()
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
	_, err := s.JS.Publish(context.Background(), "troy.trace.r", []byte(data))
	require.NoError(t, err)
}

func recv(t *testing.T, ch chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("nothing received")
		return nil
	}
}

func TestDeadLetterPermanentErrorsAtOnce(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	var calls atomic.Int32
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, bus.Permanentf("cannot parse")
	})
	pub(t, s, "garbage")
	m := recv(t, dlq)
	assert.Equal(t, "troy.dlq.graph.r", m.Subject)
	assert.Equal(t, "cannot parse", m.Header.Get(bus.HeaderReason))
	assert.Equal(t, "troy.trace.r", m.Header.Get(bus.HeaderOrigin))
	assert.Equal(t, "1", m.Header.Get(bus.HeaderDeliveries))
	assert.Equal(t, "garbage", string(m.Data))
	assert.Equal(t, int32(1), calls.Load(), "never redelivered, nor retried")
}

func TestDeadLetterAfterLastDelivery(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	var calls atomic.Int32
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, errors.New("downstream unavailable")
	})
	pub(t, s, "x")
	m := recv(t, dlq)
	maxDeliver := deps.Topology.ConsumerDefaults.MaxDeliver
	assert.Equal(t, "gave up after 5 deliveries: downstream unavailable", m.Header.Get(bus.HeaderReason))
	assert.Equal(t, "5", m.Header.Get(bus.HeaderDeliveries))
	assert.Equal(t, int32(3*maxDeliver), calls.Load(), "every allowed delivery tried, each retried twice in process")
}

func TestTransientErrorsAreRetriedUntilSuccess(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	done := make(chan struct{})
	var calls atomic.Int32
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		if calls.Add(1) < 5 { // past the in-process retries: redelivered, then succeeds
			return nil, errors.New("try again")
		}
		close(done)
		return nil, nil
	})
	pub(t, s, "x")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not retried to success")
	}
	settled(t, s, pipelines.StreamTraces, pipelines.ConsumerGraph)
	assert.Len(t, dlq, 0)
}

func TestRecoverTurnsPanicIntoDeadLetter(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		var m map[string]int
		m["boom"]++ // nil map write
		return nil, nil
	})
	pub(t, s, "poison")
	m := recv(t, dlq)
	assert.True(t, strings.HasPrefix(m.Header.Get(bus.HeaderReason), "handler panicked: assignment to entry in nil map"), m.Header.Get(bus.HeaderReason))
}

func TestMetricsCountOutcomes(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	reg := prometheus.NewRegistry()
	bus.NewMetrics(reg)
	deps.Metrics = bus.NewMetrics(reg) // a second registration reuses the series instead of failing
	runStage(t, deps, func(m *message.Message) ([]*message.Message, error) {
		if string(m.Payload) == "bad" {
			return nil, bus.Permanentf("bad")
		}
		return nil, nil
	})
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
	s, deps := bustest.Provisioned(t)
	topo := *deps.Topology
	topo.ConsumerDefaults.AckWait.Duration = time.Second
	require.NoError(t, bus.Provision(context.Background(), s.JS, &topo))
	deps.Topology = &topo
	var calls atomic.Int32
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		time.Sleep(2500 * time.Millisecond) // a slow LLM call, past the ack wait
		return nil, nil
	})
	pub(t, s, "x")
	settled(t, s, pipelines.StreamTraces, pipelines.ConsumerGraph)
	c, err := s.JS.Consumer(context.Background(), pipelines.StreamTraces, pipelines.ConsumerGraph)
	require.NoError(t, err)
	info, err := c.Info(context.Background())
	require.NoError(t, err)
	assert.Zero(t, info.NumRedelivered, "never redelivered while in progress")
	assert.Equal(t, int32(1), calls.Load())
}

// A message whose handler never answers (the process crashed, hung, or was
// killed on every delivery) reaches the dead-letter stream on the one extra
// delivery the consumer allows, instead of vanishing when the server stops
// redelivering it.
func TestDeadLetterWhenNoDeliveryEverFinished(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	dlq := deadLetters(t, s)
	pub(t, s, "poison")
	c, err := s.JS.Consumer(context.Background(), pipelines.StreamTraces, pipelines.ConsumerGraph)
	require.NoError(t, err)
	maxDeliver := deps.Topology.ConsumerDefaults.MaxDeliver
	for range maxDeliver { // deliveries that end without an answer, as a crash would
		b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		m := <-b.Messages()
		require.NotNil(t, m)
		require.NoError(t, m.Nak())
	}
	var calls atomic.Int32
	runStage(t, deps, func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, nil
	})
	d := recv(t, dlq)
	assert.Contains(t, d.Header.Get(bus.HeaderReason), "no handler finished it in 5 deliveries")
	assert.Equal(t, "6", d.Header.Get(bus.HeaderDeliveries))
	assert.Equal(t, "poison", string(d.Data))
	assert.Zero(t, calls.Load(), "the handler is not tried again")
}
