package agentrun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
)

// SpendBucket keeps each agent's spend per day.
const SpendBucket = pipelines.BucketAgentSpend

// Quota is a daily dollar limit per agent name, shared by every runner:
// a run starts only with quota left, its ceiling is what is left, and its
// spend is added when it ends.
type Quota struct{ kv jetstream.KeyValue }

// OpenQuota opens the bucket.
func OpenQuota(ctx context.Context, js jetstream.JetStream) (*Quota, error) {
	kv, err := js.KeyValue(ctx, SpendBucket)
	if err != nil {
		return nil, fmt.Errorf("quota: bucket %s: %w", SpendBucket, err)
	}
	return &Quota{kv: kv}, nil
}

func spendKey(agentName string, day time.Time) string {
	return "d." + agentName + "." + day.UTC().Format("20060102")
}

// Spent is what an agent spent on day (UTC).
func (q *Quota) Spent(ctx context.Context, agentName string, day time.Time) (float64, error) {
	v, _, err := q.get(ctx, spendKey(agentName, day))
	return v, err
}

func (q *Quota) get(ctx context.Context, key string) (float64, uint64, error) {
	e, err := q.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("quota: %w", err)
	}
	v, err := strconv.ParseFloat(string(e.Value()), 64)
	if err != nil {
		return 0, 0, fmt.Errorf("quota %s: %q is not a number", key, e.Value())
	}
	return v, e.Revision(), nil
}

// Add adds spend to an agent's day, safely against other runners.
func (q *Quota) Add(ctx context.Context, agentName string, day time.Time, usd float64) error {
	if usd <= 0 {
		return nil
	}
	key := spendKey(agentName, day)
	for range 10 {
		v, rev, err := q.get(ctx, key)
		if err != nil {
			return err
		}
		val := []byte(strconv.FormatFloat(v+usd, 'f', -1, 64))
		if rev == 0 {
			_, err = q.kv.Create(ctx, key, val)
		} else {
			_, err = q.kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSequence(err) {
			return fmt.Errorf("quota: %w", err)
		}
	}
	return fmt.Errorf("quota %s: too many concurrent updates", key)
}

// QuotaSink adds each model call's cost to the agent's day as it is made.
type QuotaSink struct {
	Q     *Quota
	Agent string
	Day   time.Time

	mu   sync.Mutex
	errs []string
}

// Emit implements agent.Sink.
func (s *QuotaSink) Emit(ev agent.Event) {
	if ev.Type != agent.EventCostRecorded {
		return
	}
	usd, _ := ev.Data["call_usd"].(float64)
	if usd <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Q.Add(ctx, s.Agent, s.Day, usd); err != nil {
		s.mu.Lock()
		if len(s.errs) < 5 {
			s.errs = append(s.errs, "daily quota not updated: "+err.Error())
		}
		s.mu.Unlock()
	}
}

// Errors are the updates that failed.
func (s *QuotaSink) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}
