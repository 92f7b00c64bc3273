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
	return append([]*trace.Step(nil), s.m[session]...), nil
}

// Append implements Sessions.
func (s *MemSessions) Append(_ context.Context, session string, step *trace.Step) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := append(s.m[session], step)
	if len(h) > MaxSessionSteps {
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
