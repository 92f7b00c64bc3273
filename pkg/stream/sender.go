package stream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/bus"
)

// Publisher publishes to JetStream.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Starts records that a trace was started (the streams bucket).
type Starts interface {
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
}

// Sender puts a streamed trace's messages on its partition: the HTTP
// streaming endpoints use it for traces their clients name, the agent
// runner for the runs it owns.
type Sender struct {
	Pub        Publisher
	Partitions int
}

// Start publishes a trace's start: body is a Start (agent, metadata),
// policyHash the policy its steps are checked against.
func (s Sender) Start(ctx context.Context, traceID string, body []byte, policyHash string) error {
	_, err := s.Pub.PublishMsg(ctx, s.StartMsg(traceID, body, policyHash))
	return err
}

// StartMsg is the message Start publishes.
func (s Sender) StartMsg(traceID string, body []byte, policyHash string) *nats.Msg {
	m := nats.NewMsg(bus.StreamSubject(bus.StreamStart, traceID, s.Partitions))
	m.Data = body
	m.Header.Set(bus.HeaderPolicy, policyHash)
	return m
}

// Steps publishes one step or a JSON list of them.
func (s Sender) Steps(ctx context.Context, traceID string, body []byte, agent, policyHash string) error {
	_, err := s.Pub.PublishMsg(ctx, s.StepsMsg(traceID, body, agent, policyHash))
	return err
}

// StepsMsg is the message Steps publishes.
func (s Sender) StepsMsg(traceID string, body []byte, agent, policyHash string) *nats.Msg {
	m := nats.NewMsg(bus.StreamSubject(bus.StreamStep, traceID, s.Partitions))
	m.Data = body
	if agent != "" {
		m.Header.Set(bus.HeaderAgent, agent)
	}
	m.Header.Set(bus.HeaderPolicy, policyHash)
	return m
}

// End publishes a trace's end; its report follows.
func (s Sender) End(ctx context.Context, traceID string, body []byte) error {
	_, err := s.Pub.PublishMsg(ctx, s.EndMsg(traceID, body))
	return err
}

// EndMsg is the message End publishes.
func (s Sender) EndMsg(traceID string, body []byte) *nats.Msg {
	m := nats.NewMsg(bus.StreamSubject(bus.StreamEnd, traceID, s.Partitions))
	m.Data = body
	return m
}

// Record notes that a trace the caller owns (a fresh id) was started, as
// the HTTP endpoint does, so a client cannot start it a second time.
func Record(ctx context.Context, starts Starts, traceID string, body []byte) error {
	if _, err := starts.Create(ctx, StartedKey(traceID), body); err != nil {
		return fmt.Errorf("recording the start of %s: %w", traceID, err)
	}
	return nil
}
