package guard

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/trace"
)

// SessionBucket holds each session's allowed actions; entries expire with
// the bucket's TTL (pipelines/topology.yaml).
const SessionBucket = pipelines.BucketSessions

// MaxSessionSteps bounds the history kept per session (the latest win).
const MaxSessionSteps = 500

// KVSessions keeps session histories in a JetStream KV bucket, so every
// guard process sees the same history.
type KVSessions struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
}

// OpenSessions binds to the sessions bucket.
func OpenSessions(ctx context.Context, js jetstream.JetStream) (*KVSessions, error) {
	kv, err := js.KeyValue(ctx, SessionBucket)
	if err != nil {
		return nil, fmt.Errorf("guard sessions: bucket %s: %w (was the topology provisioned?)", SessionBucket, err)
	}
	return &KVSessions{kv: kv, js: js}, nil
}

// KV keys allow few characters; any session id maps to one.
func sessionKey(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// History implements Sessions. It reads through the bucket's leader: a
// replica that lags would show a history without the latest allowed
// action, and the check would be judged on less than happened.
func (s *KVSessions) History(ctx context.Context, session string) ([]*trace.Step, error) {
	v, err := bus.KVLeaderGet(ctx, s.js, SessionBucket, sessionKey(session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return []*trace.Step{}, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeHistory(v)
}

func decodeHistory(data []byte) ([]*trace.Step, error) {
	steps := []*trace.Step{}
	if data == nil {
		return steps, nil
	}
	if err := json.Unmarshal(data, &steps); err != nil {
		return nil, fmt.Errorf("stored history is not valid (delete its key from bucket %s to start the session afresh): %w", SessionBucket, err)
	}
	return steps, nil
}

// Append implements Sessions. Concurrent appends to one session retry on
// the revision check, so none is lost.
func (s *KVSessions) Append(ctx context.Context, session string, step *trace.Step) error {
	err := bus.UpdateKV(ctx, s.kv, sessionKey(session), func(cur []byte) ([]byte, bus.KVChange, error) {
		steps, err := decodeHistory(cur)
		if err != nil {
			return nil, bus.KVKeep, err
		}
		steps = append(steps, step)
		if len(steps) > MaxSessionSteps {
			steps = steps[len(steps)-MaxSessionSteps:]
		}
		data, err := json.Marshal(steps)
		return data, bus.KVWrite, err
	})
	if err != nil {
		return fmt.Errorf("session %q: %w", session, err)
	}
	return nil
}
