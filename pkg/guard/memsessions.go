package guard

import (
	"context"
	"sync"

	"github.com/troy-audit/troy/pkg/trace"
)

// MemSessions keeps session histories in this process (a proxy whose
// sessions are its own connections), each bounded to MaxSessionSteps.
type MemSessions struct {
	mu sync.Mutex
	m  map[string][]*trace.Step
}

// NewMemSessions makes an empty store.
func NewMemSessions() *MemSessions { return &MemSessions{m: map[string][]*trace.Step{}} }

// History implements Sessions.
func (s *MemSessions) History(_ context.Context, session string) ([]*trace.Step, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.m[session]
	if len(h) > MaxSessionSteps {
		h = h[len(h)-MaxSessionSteps:]
	}
	return append([]*trace.Step(nil), h...), nil
}

// Append implements Sessions.
func (s *MemSessions) Append(_ context.Context, session string, step *trace.Step) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := append(s.m[session], step)
	// trimmed only at twice the bound, so a long session does not copy
	// the whole bound on every call (History shows the last MaxSessionSteps)
	if len(h) >= 2*MaxSessionSteps {
		h = append(h[:0:0], h[len(h)-MaxSessionSteps:]...)
	}
	s.m[session] = h
	return nil
}

// Forget drops a session that is over.
func (s *MemSessions) Forget(session string) {
	s.mu.Lock()
	delete(s.m, session)
	s.mu.Unlock()
}
