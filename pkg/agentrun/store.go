package agentrun

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
)

// SessionsBucket holds the sessions.
const SessionsBucket = pipelines.BucketAgentSessions

// Sessions keeps agent sessions in the JetStream KV bucket
// troy_agent_sessions: a crash or a cancel resumes from the last phase. A
// save is conditional on the revision this process last read or wrote, so
// two runs of one session (a resume while it still runs) cannot both go
// on: the second to save gets agent.ErrSessionConflict.
type Sessions struct {
	kv  jetstream.KeyValue
	mu  sync.Mutex
	rev map[string]uint64
}

// OpenSessions opens the bucket (provisioned from the topology).
func OpenSessions(ctx context.Context, js jetstream.JetStream) (*Sessions, error) {
	kv, err := js.KeyValue(ctx, SessionsBucket)
	if err != nil {
		return nil, fmt.Errorf("agent sessions: bucket %s: %w", SessionsBucket, err)
	}
	return &Sessions{kv: kv, rev: map[string]uint64{}}, nil
}

// ValidID reports whether a session or run id is usable as a KV key, a
// subject token and a trace id: 1 to 64 letters, digits, - or _.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func key(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("session id %q: use 1 to 64 letters, digits, - or _", id)
	}
	return "s." + id, nil
}

// Load implements agent.Store.
func (s *Sessions) Load(ctx context.Context, id string) (*agent.State, error) {
	k, err := key(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", agent.ErrSessionNotFound, err)
	}
	e, err := s.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, agent.ErrSessionNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("agent sessions: %w", err)
	}
	s.mu.Lock()
	s.rev[id] = e.Revision()
	s.mu.Unlock()
	return agent.DecodeState(e.Value())
}

// Save implements agent.Store.
func (s *Sessions) Save(ctx context.Context, st *agent.State) error {
	k, err := key(st.SessionID)
	if err != nil {
		return err
	}
	b, err := agent.EncodeState(st)
	if err != nil {
		return err
	}
	s.mu.Lock()
	last, known := s.rev[st.SessionID]
	s.mu.Unlock()
	var rev uint64
	if known {
		rev, err = s.kv.Update(ctx, k, b, last)
	} else {
		rev, err = s.kv.Create(ctx, k, b)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return fmt.Errorf("session %s: %w", st.SessionID, agent.ErrSessionConflict)
	}
	if err != nil {
		return fmt.Errorf("agent sessions: save %s: %w", st.SessionID, err)
	}
	s.mu.Lock()
	s.rev[st.SessionID] = rev
	s.mu.Unlock()
	return nil
}

// isWrongLastSequence recognises a conditional update that lost the race.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Summary is one line of `troy agent list`.
type Summary struct {
	SessionID  string       `json:"session_id"`
	RunID      string       `json:"run_id"`
	Agent      string       `json:"agent"`
	Goal       string       `json:"goal"`
	Status     agent.Status `json:"status"`
	Iterations int          `json:"iterations"`
	CostUSD    float64      `json:"cost_usd"`
	Tokens     int          `json:"total_tokens"`
	UpdatedAt  time.Time    `json:"updated_at"`
}

// List summarises every stored session, most recent first.
func (s *Sessions) List(ctx context.Context) ([]Summary, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent sessions: %w", err)
	}
	var out []Summary
	for k := range lister.Keys() {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		st, err := agent.DecodeState(e.Value())
		if err != nil {
			continue
		}
		out = append(out, Summary{SessionID: st.SessionID, RunID: st.RunID, Agent: st.Agent, Goal: st.Goal, Status: st.Status,
			Iterations: st.Iteration, CostUSD: st.CostUSD, Tokens: st.Usage.Total(), UpdatedAt: st.UpdatedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.After(out[j].UpdatedAt) })
	return out, nil
}

// Forget drops what this process remembers of a session (its revision),
// once its run is over here.
func (s *Sessions) Forget(id string) {
	s.mu.Lock()
	delete(s.rev, id)
	s.mu.Unlock()
}
