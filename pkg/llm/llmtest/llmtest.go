// Package llmtest runs a real HTTP server that speaks the OpenAI
// chat-completions protocol on loopback, standing in for an LLM provider in
// tests and benchmarks.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Request is what the server received.
type Request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice     any `json:"tool_choice"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Authorization string `json:"-"`
}

// Response is what the server answers: a status (200 by default), headers,
// and either Content (wrapped as a chat completion) or a raw Body.
type Response struct {
	Status  int
	Header  map[string]string
	Content string
	// ToolCalls are answered as the assistant's tool calls: name and
	// arguments (JSON text).
	ToolCalls [][2]string
	Body      string
	Delay     time.Duration
}

// Server counts calls and the most calls it had in flight at once.
type Server struct {
	*httptest.Server
	Respond func(call int, r Request) Response

	calls    atomic.Int64
	inflight atomic.Int64
	maxMu    sync.Mutex
	max      int64
}

// New starts a server; it stops when the test ends.
func New(t testing.TB, respond func(call int, r Request) Response) *Server {
	s := &Server{Respond: respond}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is what a client's base URL should be.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Calls is how many chat requests arrived.
func (s *Server) Calls() int { return int(s.calls.Load()) }

// MaxInFlight is the most requests handled at once.
func (s *Server) MaxInFlight() int {
	s.maxMu.Lock()
	defer s.maxMu.Unlock()
	return int(s.max)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	s.maxMu.Lock()
	s.max = max(s.max, n)
	s.maxMu.Unlock()
	call := int(s.calls.Add(1))

	body, _ := io.ReadAll(r.Body)
	var req Request
	_ = json.Unmarshal(body, &req)
	req.Authorization = r.Header.Get("Authorization")
	resp := s.Respond(call, req)
	if resp.Delay > 0 {
		select {
		case <-time.After(resp.Delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	if resp.Body != "" || status != http.StatusOK {
		fmt.Fprint(w, resp.Body)
		return
	}
	msg := map[string]any{"role": "assistant", "content": resp.Content}
	finish := "stop"
	if len(resp.ToolCalls) > 0 {
		var calls []any
		for i, c := range resp.ToolCalls {
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", call, i), "type": "function",
				"function": map[string]any{"name": c[0], "arguments": c[1]}})
		}
		msg["tool_calls"], finish = calls, "tool_calls"
	}
	out, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", call), "object": "chat.completion", "created": 0, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
	w.Write(out)
}

// StepJSON is a valid explanation answer.
const StepJSON = `{"why": "to do its task", "data_accessed": ["input"], "alternatives": "ask the user", "risks": [], "confidence": 0.8}`
