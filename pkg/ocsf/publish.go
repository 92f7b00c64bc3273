package ocsf

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/policy"
)

// Publish sends one finding per violation of the trace keyed traceKey onto
// its violations subject. Each carries its uid as Nats-Msg-Id, so a finding
// sent again (a redelivered trace, a retried update) is dropped by
// JetStream instead of reaching a SIEM twice.
func Publish(ctx context.Context, js jetstream.JetStream, traceKey string, vs []policy.Violation, c Context) error {
	msgs, err := Messages(traceKey, vs, c)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := bus.Publish(ctx, js, bus.Out{Subject: m.Metadata.Get(bus.MetaPublishTo), Data: m.Payload, MsgID: m.UUID}); err != nil {
			return err
		}
	}
	return nil
}

// Messages are the findings of a trace as messages for a watermill stage to
// return: each addressed to its violations subject, with its uid as id.
func Messages(traceKey string, vs []policy.Violation, c Context) ([]*message.Message, error) {
	out := make([]*message.Message, 0, len(vs))
	for _, v := range vs {
		uid := UID(traceKey, v.StepID, v.RuleID, c.PolicyHash)
		body, err := events.Marshal(FromViolation(v, uid, c))
		if err != nil {
			return nil, bus.Permanent(err)
		}
		m := message.NewMessage(uid, body)
		m.Metadata.Set(bus.MetaPublishTo, Subject(v.Severity, v.RuleID))
		out = append(out, m)
	}
	return out, nil
}
