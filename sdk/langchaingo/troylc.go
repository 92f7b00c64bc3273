// Package troylc plugs troy into langchaingo: Guard wraps a tool so troy's
// guard checks every call before it runs (a blocked call is an error the
// agent's executor stops on), and Streamer is a callbacks handler that
// streams the run's steps into troy serve's live audit. No policy logic
// lives here: troy decides.
package troylc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tmc/langchaingo/callbacks"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/schema"
	"github.com/tmc/langchaingo/tools"

	"github.com/troy-audit/troy/pkg/guard"
)

// Checker is troy's guard: guard.HTTP against a troy serve (it fails
// closed when troy cannot be reached unless told otherwise), or
// guard.Local in process.
type Checker interface {
	Check(ctx context.Context, req guard.Request) (guard.Decision, error)
}

// Guarded is a tool behind troy's guard.
type Guarded struct {
	tools.Tool
	Guard   Checker
	Session string // groups the run's checks, so cross-step rules see them
	Agent   string
	// Metadata adds context to each check (the user, the tenant, the
	// data's classification), as the step's metadata.
	Metadata func(ctx context.Context, tool, input string) map[string]any
	// Streamer, when set, gets each call as a step of the run's trace.
	Streamer *Streamer
}

// Guard wraps t.
func Guard(t tools.Tool, g Checker, session, agent string) *Guarded {
	return &Guarded{Tool: t, Guard: g, Session: session, Agent: agent}
}

// BlockedError is a call troy's guard refused.
type BlockedError struct {
	Tool     string
	Decision guard.Decision
}

func (e *BlockedError) Error() string {
	var why []string
	for _, v := range e.Decision.Violations {
		why = append(why, fmt.Sprintf("rule %s (%s): %s", v.RuleID, v.Severity, v.Description))
	}
	if e.Decision.Reason != "" {
		why = append(why, e.Decision.Reason)
	}
	return fmt.Sprintf("troy blocked %s: %s", e.Tool, strings.Join(why, "; "))
}

// Call checks the call with troy, then runs the tool if it is allowed.
func (g *Guarded) Call(ctx context.Context, input string) (string, error) {
	req := guard.Request{SessionID: g.Session, Agent: guard.Agent{Name: g.Agent},
		Action: guard.Action{Type: "tool_call", Name: g.Name(), Input: inputValue(input)}}
	if g.Metadata != nil {
		req.Action.Metadata = g.Metadata(ctx, g.Name(), input)
	}
	d, err := g.Guard.Check(ctx, req)
	if d.Decision != guard.Allow {
		err = errors.Join(&BlockedError{Tool: g.Name(), Decision: d}, err)
		g.Streamer.ToolCall(ctx, g.Name(), input, "", d, err)
		return "", err
	}
	out, err := g.Tool.Call(ctx, input)
	g.Streamer.ToolCall(ctx, g.Name(), input, out, d, err)
	return out, err
}

// inputValue is a tool's input as troy sees it: parsed when it is JSON.
func inputValue(input string) any {
	var v any
	if json.Unmarshal([]byte(input), &v) == nil {
		if _, ok := v.(map[string]any); ok {
			return v
		}
	}
	return map[string]any{"input": input}
}

// Streamer streams a run's steps into troy serve's live audit (POST
// /v1/traces/{id}/steps), each as it happens: LLM calls, tool calls with
// their input and output, and the agent's final answer. It never breaks
// the run (a step troy did not take is kept in Errors), but each step is
// one HTTP call, made before the run goes on.
type Streamer struct {
	callbacks.SimpleHandler
	URL     string // troy serve's HTTP API
	Token   string // a token with scope ingest, when the API takes tokens
	TraceID string
	Agent   string
	Client  *http.Client

	mu     sync.Mutex
	n      int
	action *schema.AgentAction
	Errors []error
}

var _ callbacks.Handler = (*Streamer)(nil)

func (s *Streamer) send(ctx context.Context, path string, body any) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.URL, "/")+path, bytes.NewReader(b))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		if s.Token != "" {
			req.Header.Set("Authorization", "Bearer "+s.Token)
		}
		client := s.Client
		if client == nil {
			client = http.DefaultClient
		}
		var resp *http.Response
		if resp, err = client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				err = fmt.Errorf("troy answered %s", resp.Status)
			}
		}
	}
	if err != nil {
		s.Errors = append(s.Errors, fmt.Errorf("stream %s: %w", path, err))
	}
}

func (s *Streamer) step(ctx context.Context, typ, name string, input, output any, meta map[string]any) {
	s.n++
	st := map[string]any{"step_id": fmt.Sprint(s.n), "type": typ, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)}
	if name != "" {
		st["name"] = name
	}
	if input != nil {
		st["input"] = input
	}
	if output != nil {
		st["output"] = output
	}
	if meta != nil {
		st["metadata"] = meta
	}
	s.send(ctx, "/v1/traces/"+url.PathEscape(s.TraceID)+"/steps?agent="+url.QueryEscape(s.Agent), st)
}

// HandleLLMGenerateContentEnd streams an LLM call with its answer.
func (s *Streamer) HandleLLMGenerateContentEnd(ctx context.Context, res *llms.ContentResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out any
	if res != nil && len(res.Choices) > 0 {
		out = map[string]any{"content": res.Choices[0].Content}
	}
	s.step(ctx, "llm_call", "", nil, out, nil)
}

// ToolCall streams a tool call with its input, its output or error, and
// troy's decision on it (Guarded calls it when its Streamer is set: the
// executor reports no tool callbacks of its own).
func (s *Streamer) ToolCall(ctx context.Context, name, input, output string, d guard.Decision, err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	meta := map[string]any{"decision": d.Decision}
	var out any
	if err != nil {
		meta["error"] = err.Error()
	} else {
		out = map[string]any{"output": output}
	}
	s.step(ctx, "tool_call", name, inputValue(input), out, meta)
}

// HandleAgentFinish streams the final answer as the run's decision.
func (s *Streamer) HandleAgentFinish(ctx context.Context, f schema.AgentFinish) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step(ctx, "decision", "final_answer", nil, f.ReturnValues, nil)
}

// Close ends the trace (its report follows) and returns what could not be
// streamed.
func (s *Streamer) Close(ctx context.Context) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.send(ctx, "/v1/traces/"+url.PathEscape(s.TraceID)+"/end", map[string]any{})
	return s.Errors
}
