package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// runRouter runs a watermill router with one handler from the graph
// consumer to troy.graph.<run> until the test ends.
func runRouter(t *testing.T, s *bustest.Server, deps bus.Deps, h message.HandlerFunc) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddMiddleware(middleware.Recoverer)
	sub := &bus.Subscriber{JS: s.JS, Topology: deps.Topology, Workers: 4, RetryDelay: 10 * time.Millisecond}
	r.AddHandler("graph", pipelines.ConsumerGraph, sub, "troy.graph.r", &bus.Publisher{JS: s.JS}, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Running()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func streamMessages(t *testing.T, s *bustest.Server, stream string) uint64 {
	t.Helper()
	st, err := s.JS.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

func settled(t *testing.T, s *bustest.Server, stream, consumer string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := s.JS.Consumer(context.Background(), stream, consumer)
		require.NoError(t, err)
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, 10*time.Second, 10*time.Millisecond, "every input acked")
}

// A stage on watermill's router over the JetStream transport: outputs are
// stored before the input is acked, a failing or panicking handler's input
// is redelivered, and a redelivered input's output is stored once.
func TestWatermillOverJetStream(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	var calls atomic.Int32
	runRouter(t, s, deps, func(m *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		switch string(m.Payload) {
		case "fail-twice":
			if d, _ := strconv.Atoi(m.Metadata.Get(bus.MetaDeliveries)); d < 3 {
				return nil, assert.AnError
			}
		case "panic-once":
			if d, _ := strconv.Atoi(m.Metadata.Get(bus.MetaDeliveries)); d < 2 {
				panic("boom")
			}
		}
		out := message.NewMessage("graph."+m.UUID, append([]byte("out:"), m.Payload...))
		out.Metadata.Set(bus.HeaderRun, m.Metadata.Get(bus.HeaderRun))
		return []*message.Message{out}, nil
	})
	ctx := context.Background()
	for i, body := range []string{"ok", "fail-twice", "panic-once"} {
		m := jetstreamMsg("troy.trace.r", body, "in-"+strconv.Itoa(i))
		_, err := s.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	settled(t, s, pipelines.StreamTraces, pipelines.ConsumerGraph)
	assert.EqualValues(t, 3, streamMessages(t, s, pipelines.StreamGraphs), "one output each")
	assert.EqualValues(t, 1+3+2, calls.Load(), "retried until they succeed")

	// the same output published again (a redelivery after a crash) is stored once
	pub := &bus.Publisher{JS: s.JS}
	require.NoError(t, pub.Publish("troy.graph.r", message.NewMessage("graph.in-0", []byte("again"))))
	assert.EqualValues(t, 3, streamMessages(t, s, pipelines.StreamGraphs))
	assert.Equal(t, "1", func() string {
		c, err := s.JS.Consumer(ctx, pipelines.StreamGraphs, pipelines.ConsumerEvaluator)
		require.NoError(t, err)
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		return bus.ToMessage(m).Metadata.Get(bus.MetaDeliveries)
	}())
}

func jetstreamMsg(subject, body, id string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	m.Header.Set(bus.HeaderMsgID, id)
	m.Header.Set(bus.HeaderRun, "r")
	return m
}

// A stage whose consumer disappears stops and says why (it could spin or
// idle forever), so troy serve fails loudly instead of running a dead stage.
func TestRouterStageStopsWhenItsConsumerIsGone(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- bus.RunRouterStage(ctx, deps, pipelines.ConsumerGraph, 2, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	}()
	// the stage is up once it takes a message
	_, err := s.JS.PublishMsg(ctx, jetstreamMsg("troy.trace.r", "x", "probe"))
	require.NoError(t, err)
	settled(t, s, pipelines.StreamTraces, pipelines.ConsumerGraph)
	require.NoError(t, s.JS.DeleteConsumer(ctx, pipelines.StreamTraces, pipelines.ConsumerGraph))
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "subscribe graph")
	case <-time.After(45 * time.Second):
		t.Fatal("the stage kept running without its consumer")
	}
}

// A transient error is retried in process (the same delivery, a moment
// later) before the message is given back to JetStream; each attempt is
// bounded by the stage's timeout, which cancels the message's context.
func TestRouterStageRetriesInProcessAndTimesOut(t *testing.T) {
	s, deps := bustest.Provisioned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var attempts sync.Map // payload -> []deliveries seen
	seen := func(m *message.Message) []string {
		v, _ := attempts.LoadOrStore(string(m.Payload), &[]string{})
		p := v.(*[]string)
		*p = append(*p, m.Metadata.Get(bus.MetaDeliveries))
		return *p
	}
	done := make(chan error, 1)
	go func() {
		done <- bus.RunRouterStage(ctx, deps, pipelines.ConsumerGraph, 1, func(m *message.Message) ([]*message.Message, error) {
			n := len(seen(m))
			switch string(m.Payload) {
			case "flaky":
				if n == 1 {
					return nil, errors.New("KV hiccup")
				}
			case "slow":
				if n == 1 {
					<-m.Context().Done() // the stage's timeout ends the attempt
					return nil, m.Context().Err()
				}
			}
			return nil, nil
		}, bus.WithTimeout(300*time.Millisecond))
	}()
	for i, body := range []string{"flaky", "slow"} {
		_, err := s.JS.PublishMsg(ctx, jetstreamMsg("troy.trace.r", body, "rt-"+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	settled(t, s, pipelines.StreamTraces, pipelines.ConsumerGraph)
	for _, body := range []string{"flaky", "slow"} {
		v, ok := attempts.Load(body)
		require.True(t, ok, body)
		assert.Equal(t, []string{"1", "1"}, *v.(*[]string), "%s: retried within its first delivery", body)
	}
	cancel()
	require.NoError(t, <-done)
}
