package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
)

// Status is where a run stands.
type Status string

// Run statuses.
const (
	Running   Status = "running"
	Complete  Status = "complete"
	Partial   Status = "partial"
	Blocked   Status = "blocked"
	Exhausted Status = "exhausted"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
)

// Resumable reports whether a session in this status may be resumed: it was
// stopped from outside (cancel, budget, a crash, a provider failure), not
// finished by the model.
func (s Status) Resumable() bool {
	return s == Running || s == Exhausted || s == Cancelled || s == Failed
}

// ToolCallRecord is one executed (or refused) call.
type ToolCallRecord struct {
	CallID        string           `json:"call_id"`
	Tool          string           `json:"tool"`
	Arguments     json.RawMessage  `json:"arguments"`
	Rationale     string           `json:"rationale"`
	StepID        string           `json:"step_id"`
	OK            bool             `json:"ok"`
	ResultPreview string           `json:"result_preview"`
	ErrorCode     string           `json:"error_code,omitempty"`
	DurationMS    int64            `json:"duration_ms"`
	Artifacts     []tools.Artifact `json:"artifacts,omitempty"`
	// Executed is false for a call refused before it ran (invalid
	// arguments, a guardrail); Withheld, for a result the model did not see.
	Executed bool `json:"executed"`
	Withheld bool `json:"withheld,omitempty"`
}

// IterationRecord is what happened in one iteration.
type IterationRecord struct {
	Index      int              `json:"index"`
	StartedAt  time.Time        `json:"started_at"`
	EndedAt    time.Time        `json:"ended_at,omitzero"`
	Plan       *Plan            `json:"plan,omitempty"`
	ToolCalls  []ToolCallRecord `json:"tool_calls"`
	Evaluation *Evaluation      `json:"evaluation,omitempty"`
	Violations []Violation      `json:"violations"`
	// SafetyChecks are the guardrails' decisions in this iteration.
	SafetyChecks []any `json:"safety_checks,omitempty"`
}

// State is a session: everything needed to resume it, checkpointed after
// every phase.
type State struct {
	Goal              string               `json:"goal"`
	SessionID         string               `json:"session_id"`
	RunID             string               `json:"run_id"`
	Runs              []string             `json:"runs"`
	Agent             string               `json:"agent"`
	Status            Status               `json:"status"`
	Iteration         int                  `json:"iteration"`
	Iterations        []IterationRecord    `json:"iterations"`
	Transcript        []llm.Turn           `json:"transcript"`
	Scratchpad        map[string]any       `json:"scratchpad"`
	Summary           string               `json:"summary,omitempty"`
	SummarizedThrough int                  `json:"summarized_through,omitempty"`
	ToolCallCount     int                  `json:"tool_call_count"`
	Usage             llm.Usage            `json:"usage"`
	UsageByPhase      map[string]llm.Usage `json:"usage_by_phase"`
	CostUSD           float64              `json:"cost_usd"`
	CostByPhase       map[string]float64   `json:"cost_by_phase,omitempty"`
	Breaker           BreakerState         `json:"breaker"`
	// Awaiting is a call the guardrails were deciding on (an approval)
	// when the run last saved.
	Awaiting *AwaitingCall `json:"awaiting,omitempty"`
	// Pending are results of calls executed but not yet shown to the model
	// (the run stopped between EXECUTE and OBSERVE); a resume delivers them.
	Pending     []llm.ToolResult  `json:"pending,omitempty"`
	Final       *tools.Submission `json:"final,omitempty"`
	FinalAnswer string            `json:"final_answer,omitempty"`
	// Counters are the current run's budgets spent so far, so a run that
	// goes on after its runner died does not start them afresh.
	Counters RunCounters `json:"counters"`
	// Origin is what built the run (see Config.Origin).
	Origin    json.RawMessage `json:"origin,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// NewID is 12 random hex characters.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrSessionNotFound is returned for an unknown session id.
var ErrSessionNotFound = errors.New("no such session")

// AwaitingCall is a chosen call not yet decided on.
type AwaitingCall struct {
	Call llm.ToolCall `json:"call"`
	Plan *Plan        `json:"plan"`
}

// RunCounters are one run's spent budgets.
type RunCounters struct {
	RunID      string    `json:"run_id"`
	Started    time.Time `json:"started"`
	Iterations int       `json:"iterations"`
	ToolCalls  int       `json:"tool_calls"`
	Usage      llm.Usage `json:"usage"`
}

// ErrSessionConflict is returned by a Store when another run saved the
// session since this one loaded it.
var ErrSessionConflict = errors.New("the session was changed by another run")

// ErrNotResumable is returned when a session finished on its own.
var ErrNotResumable = errors.New("session cannot be resumed")

// Store keeps sessions.
type Store interface {
	Load(ctx context.Context, sessionID string) (*State, error)
	Save(ctx context.Context, st *State) error
}

// MemoryStore keeps sessions in memory (copies, so a caller cannot change a
// saved session by accident).
type MemoryStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

// NewMemoryStore is an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{m: map[string][]byte{}} }

// Load implements Store.
func (s *MemoryStore) Load(_ context.Context, id string) (*State, error) {
	s.mu.Lock()
	b, ok := s.m[id]
	s.mu.Unlock()
	if !ok {
		return nil, ErrSessionNotFound
	}
	return DecodeState(b)
}

// Save implements Store.
func (s *MemoryStore) Save(_ context.Context, st *State) error {
	b, err := EncodeState(st)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.m[st.SessionID] = b
	s.mu.Unlock()
	return nil
}

// EncodeState is the stored form of a session. It runs after every phase
// on a state that grows with the run, so it uses the faster encoder.
func EncodeState(st *State) ([]byte, error) { return gojson.Marshal(st) }

// DecodeState reads a stored session.
func DecodeState(b []byte) (*State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("stored session is not readable: %w", err)
	}
	if st.Scratchpad == nil {
		st.Scratchpad = map[string]any{}
	}
	if st.UsageByPhase == nil {
		st.UsageByPhase = map[string]llm.Usage{}
	}
	return &st, nil
}
