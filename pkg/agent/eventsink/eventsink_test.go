package eventsink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/eventsink"
)

func ev(typ string, it int) agent.Event {
	return agent.Event{ID: agent.NewID(), TS: time.Now().UTC(), Type: typ, RunID: "run1", SessionID: "s1", Iteration: it, Phase: "execute",
		Data: map[string]any{"tool": "file_system"}}
}

func TestJSONL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events.jsonl")
	j, err := eventsink.OpenJSONL(p, nil)
	require.NoError(t, err)
	j.Emit(ev("run.start", 0))
	j.Emit(ev("tool.call", 1))
	assert.Empty(t, j.Close(context.Background()))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	var types []string
	for sc.Scan() {
		var e agent.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		types = append(types, e.Type)
	}
	assert.Equal(t, []string{"run.start", "tool.call"}, types)
	fi, _ := os.Stat(p)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	auth   []string
	status int
}

func (r *recorder) server(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, b)
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		st := r.status
		r.mu.Unlock()
		if st != 0 {
			w.WriteHeader(st)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestHTTPSinkFiltersAndPosts(t *testing.T) {
	rec := &recorder{}
	srv := rec.server(t)
	s := eventsink.HTTP(srv.URL, http.Header{"Authorization": {"Bearer x"}}, []string{"tool.call"})
	s.Emit(ev("run.start", 0))
	s.Emit(ev("tool.call", 1))
	assert.Empty(t, s.Close(context.Background()))
	require.Len(t, rec.bodies, 1)
	var e agent.Event
	require.NoError(t, json.Unmarshal(rec.bodies[0], &e))
	assert.Equal(t, "tool.call", e.Type)
	assert.Equal(t, "Bearer x", rec.auth[0])
}

func TestOTLPSink(t *testing.T) {
	rec := &recorder{}
	srv := rec.server(t)
	s := eventsink.OTLP(srv.URL, nil, nil)
	s.Emit(ev("tool.result", 2))
	assert.Empty(t, s.Close(context.Background()))
	require.Len(t, rec.bodies, 1)
	req := plogotlp.NewExportRequest()
	require.NoError(t, req.UnmarshalJSON(rec.bodies[0]))
	lr := req.Logs().ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
	typ, _ := lr.Attributes().Get("troy.event_type")
	assert.Equal(t, "tool.result", typ.Str())
	it, _ := lr.Attributes().Get("troy.iteration")
	assert.Equal(t, int64(2), it.Int())
	assert.Contains(t, lr.Body().Str(), `"type":"tool.result"`)
}

// A failing or unreachable endpoint is reported, and Emit never blocks.
func TestFailingSinkIsReportedNotBlocking(t *testing.T) {
	rec := &recorder{status: 500}
	srv := rec.server(t)
	s := eventsink.HTTP(srv.URL, nil, nil)
	s.Emit(ev("run.end", 1))
	probs := s.Close(context.Background())
	require.Len(t, probs, 1)
	assert.Contains(t, probs[0], "HTTP 500")

	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	t.Cleanup(func() { close(block); slow.Close() })
	s = eventsink.HTTP(slow.URL, nil, nil)
	start := time.Now()
	for i := 0; i < eventsink.QueueSize+10; i++ {
		s.Emit(ev("tool.call", i))
	}
	assert.Less(t, time.Since(start), time.Second, "a slow endpoint does not slow the run")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	probs = s.Close(ctx)
	assert.NotEmpty(t, probs)
}
