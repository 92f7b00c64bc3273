package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	openai "github.com/sashabaranov/go-openai"
)

// ToolSpec is a tool offered to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ToolCall is a call the model asked for.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult answers a ToolCall.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// Turn is one message of a conversation with tools. A user turn may carry
// the results of the previous assistant turn's calls; providers that want
// them as separate messages (OpenAI's role "tool") get them first.
type Turn struct {
	Role        string       `json:"role"` // user or assistant
	Text        string       `json:"text,omitempty"`
	ToolCalls   []ToolCall   `json:"tool_calls,omitempty"`
	ToolResults []ToolResult `json:"tool_results,omitempty"`
	Iteration   int          `json:"iteration,omitempty"`
}

// Tool choices.
const (
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
)

// Request is one completion request with tools.
type Request struct {
	Phase      string // for accounting: analyze, act, observe, compaction
	System     string
	Turns      []Turn
	Tools      []ToolSpec
	ToolChoice string
	MaxTokens  int
}

// Usage counts tokens.
type Usage struct {
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens"`
	CacheWriteTokens int `json:"cache_write_tokens"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Add sums two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.InputTokens + o.InputTokens, u.OutputTokens + o.OutputTokens,
		u.CacheReadTokens + o.CacheReadTokens, u.CacheWriteTokens + o.CacheWriteTokens}
}

// Completion is the model's answer.
type Completion struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	Model     string
	CostUSD   float64
	Priced    bool
}

// StatusError is a provider answer that was not a completion, with its
// HTTP status when there was one.
type StatusError struct {
	StatusCode int
	Err        error
}

func (e *StatusError) Error() string { return e.Err.Error() }
func (e *StatusError) Unwrap() error { return e.Err }

// Complete sends a conversation with tools and returns the model's turn.
func (c *Client) Complete(ctx context.Context, req Request) (Completion, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return Completion{}, ctx.Err()
	}
	defer func() { <-c.slots }()
	if c.overBudget() {
		return Completion{}, ErrOverBudget
	}
	oreq := openai.ChatCompletionRequest{Model: c.cfg.Model, Temperature: 0, MaxCompletionTokens: req.MaxTokens}
	if req.System != "" {
		oreq.Messages = append(oreq.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: req.System})
	}
	for _, t := range req.Turns {
		oreq.Messages = append(oreq.Messages, toOpenAI(t)...)
	}
	for _, s := range req.Tools {
		params := s.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object"}`)
		}
		oreq.Tools = append(oreq.Tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: s.Name, Description: s.Description, Parameters: params}})
	}
	if len(oreq.Tools) > 0 && req.ToolChoice != "" {
		oreq.ToolChoice = req.ToolChoice
	}
	resp, err := c.api.CreateChatCompletion(ctx, oreq)
	if err != nil {
		err = c.redact(fmt.Errorf("llm %s: %w", c.cfg.Model, err))
		var ae *openai.APIError
		var re *openai.RequestError
		switch {
		case errors.As(err, &ae):
			return Completion{}, &StatusError{StatusCode: ae.HTTPStatusCode, Err: err}
		case errors.As(err, &re):
			return Completion{}, &StatusError{StatusCode: re.HTTPStatusCode, Err: err}
		}
		return Completion{}, err
	}
	if len(resp.Choices) == 0 {
		return Completion{}, fmt.Errorf("llm %s: the answer has no choices", c.cfg.Model)
	}
	m := resp.Choices[0].Message
	out := Completion{Text: m.Content, Model: c.cfg.Model, Usage: Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}}
	if d := resp.Usage.PromptTokensDetails; d != nil {
		out.Usage.CacheReadTokens = d.CachedTokens
	}
	for _, tc := range m.ToolCalls {
		args := json.RawMessage(tc.Function.Arguments)
		if !json.Valid(args) { // kept as a JSON string so the registry can say what is wrong
			b, _ := json.Marshal(tc.Function.Arguments)
			args = b
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	if c.cfg.Pricing != nil {
		out.CostUSD, out.Priced = c.cfg.Pricing.Price(c.cfg.Model, out.Usage)
	}
	c.mu.Lock()
	c.spent += out.CostUSD
	c.mu.Unlock()
	return out, nil
}

func toOpenAI(t Turn) []openai.ChatCompletionMessage {
	var out []openai.ChatCompletionMessage
	for _, r := range t.ToolResults {
		content := r.Content
		if content == "" {
			content = "(no output)"
		}
		out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: r.CallID, Content: content})
	}
	switch t.Role {
	case "assistant":
		m := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: t.Text}
		for _, c := range t.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: c.ID, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: c.Name, Arguments: string(c.Arguments)}})
		}
		out = append(out, m)
	default:
		if t.Text != "" {
			out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: t.Text})
		}
	}
	return out
}
