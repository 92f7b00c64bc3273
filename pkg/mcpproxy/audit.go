package mcpproxy

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
)

// Streamer sends each session to troy's streaming audit as it happens:
// the session is the trace (its agent the client's name), every call a
// tool_call step with its arguments, its result and the guard's decision,
// and the connection's end the trace's end, after which its report
// follows and its findings are on troy.violations.>.
type Streamer struct {
	Sender     stream.Sender
	Starts     stream.Starts
	PolicyHash string
	Log        zerolog.Logger

	mu       sync.Mutex
	sessions map[string]*streamed // per session: its own lock, so one slow send holds up no other session
}

type streamed struct {
	mu    sync.Mutex
	steps int
	ended bool
}

// maxResultText bounds what a step keeps of a result's text.
const maxResultText = 64 << 10

// Observe is Config.Observe: it streams the call as the session's next
// step. A nil Streamer audits nothing.
func (s *Streamer) Observe(c Call) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.sessions == nil {
		s.sessions = map[string]*streamed{}
	}
	st, ok := s.sessions[c.Session]
	if !ok {
		st = &streamed{}
		s.sessions[c.Session] = st
	}
	s.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended { // a call still in flight when its connection closed
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, started := st.steps, st.steps > 0
	if !started {
		body, _ := json.Marshal(stream.Start{AgentName: c.Client, Metadata: map[string]any{"runtime": "troy mcp-proxy", "mcp_session": c.Session}})
		if err := stream.Record(ctx, s.Starts, c.Session, body); err != nil {
			s.Log.Error().Err(err).Str("session", c.Session).Msg("mcp audit: the session could not be started; its calls are not audited")
			return
		}
		if err := s.Sender.Start(ctx, c.Session, body, s.PolicyHash); err != nil {
			s.Log.Error().Err(err).Str("session", c.Session).Msg("mcp audit: the session could not be started; its calls are not audited")
			return
		}
	}
	n++
	st.steps = n
	step := &trace.Step{StepID: strconv.Itoa(n), Type: "tool_call", Name: c.Tool, Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
		Metadata: map[string]any{"decision": c.Decision.Decision, "mode": c.Decision.Mode, "runtime": "mcp"}}
	if len(c.Args) > 0 {
		var in any
		if json.Unmarshal(c.Args, &in) == nil {
			step.Input = in
		}
	}
	if c.Result != nil {
		step.Output = resultOutput(c.Result)
	}
	if c.Err != nil {
		step.Metadata["error"] = c.Err.Error()
	}
	if len(c.Findings) > 0 {
		var fs []map[string]any
		for _, f := range c.Findings {
			m := f.Map()
			delete(m, "value") // the kind, not the secret itself, goes into the audit
			fs = append(fs, m)
		}
		step.Metadata["result_findings"] = fs
	}
	body, _ := json.Marshal(step)
	if err := s.Sender.Steps(ctx, c.Session, body, c.Client, s.PolicyHash); err != nil {
		s.Log.Error().Err(err).Str("session", c.Session).Str("tool", c.Tool).Msg("mcp audit: a call could not be streamed")
	}
}

// End is Config.Ended: the session's trace ends and is reported.
func (s *Streamer) End(session string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	st, ok := s.sessions[session]
	delete(s.sessions, session)
	s.mu.Unlock()
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ended = true
	if st.steps == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Sender.End(ctx, session, nil); err != nil {
		s.Log.Error().Err(err).Str("session", session).Msg("mcp audit: the session's end could not be sent; it ends when the streamer's idle timeout does")
	}
}

// resultOutput is what a step keeps of a result: its structured content,
// or its text (bounded), and whether it was an error.
func resultOutput(r *mcp.CallToolResult) map[string]any {
	out := map[string]any{"is_error": r.IsError}
	if r.StructuredContent != nil {
		out["structured"] = r.StructuredContent
	}
	var text strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok && text.Len() < maxResultText {
			text.WriteString(t.Text)
		}
	}
	if text.Len() > 0 {
		t := text.String()
		if len(t) > maxResultText {
			t = t[:maxResultText]
			out["truncated"] = true
		}
		out["text"] = t
	}
	return out
}
