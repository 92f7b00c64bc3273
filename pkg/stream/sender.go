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
	m := nats.NewMsg(bus.StreamSubject(bus.StreamStart, traceID, s.Partitions))
	m.Data = body
	m.Header.Set(bus.HeaderPolicy, policyHash)
	_, err := s.Pub.PublishMsg(ctx, m)
	return err
}

// Steps publishes one step or a JSON list of them.
func (s Sender) Steps(ctx context.Context, traceID string, body []byte, agent, policyHash string) error {
	m := nats.NewMsg(bus.StreamSubject(bus.StreamStep, traceID, s.Partitions))
	m.Data = body
	if agent != "" {
		m.Header.Set(bus.HeaderAgent, agent)
	}
	m.Header.Set(bus.HeaderPolicy, policyHash)
	_, err := s.Pub.PublishMsg(ctx, m)
	return err
}

// End publishes a trace's end; its report follows.
func (s Sender) End(ctx context.Context, traceID string, body []byte) error {
	m := nats.NewMsg(bus.StreamSubject(bus.StreamEnd, traceID, s.Partitions))
	m.Data = body
	_, err := s.Pub.PublishMsg(ctx, m)
	return err
}

// Open starts a trace the caller owns (a fresh id): it records the start as
// the HTTP endpoint does, so a client cannot start it a second time, then
// publishes it.
func (s Sender) Open(ctx context.Context, starts Starts, traceID string, body []byte, policyHash string) error {
	if _, err := starts.Create(ctx, StartedKey(traceID), body); err != nil {
		return fmt.Errorf("recording the start of %s: %w", traceID, err)
	}
	return s.Start(ctx, traceID, body, policyHash)
}
