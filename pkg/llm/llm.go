// Package llm talks to any OpenAI-compatible chat-completions endpoint
// (OpenAI, Azure OpenAI, vLLM, Ollama, LM Studio, LiteLLM…) through
// sashabaranov/go-openai, with bounded concurrency, retries that honour
// Retry-After, per-request timeouts, token accounting, and an API key that
// never appears in an error.
package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// DefaultModel is used when none is configured.
const DefaultModel = "gpt-4o-mini"

// Config says which endpoint and model to use and how hard to try.
type Config struct {
	Model       string
	BaseURL     string // e.g. http://localhost:11434/v1 for Ollama; "" is OpenAI
	APIKey      string
	Timeout     time.Duration // per HTTP attempt
	MaxRetries  int           // retries of 429, 5xx and network errors
	Concurrency int           // calls in flight at once, across everything using the client
	Pricing     *Pricing      // turns tokens into cost; nil counts nothing
	BudgetUSD   float64       // stop calling once this much is spent (0: no limit)
}

// Enabled reports whether an LLM is configured at all: a key or a base URL.
func (c Config) Enabled() bool { return c.APIKey != "" || c.BaseURL != "" }

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 4
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.MaxRetries < 0 || c.Concurrency < 0 {
		return errors.New("llm: timeout, retries and concurrency must not be negative")
	}
	if c.BaseURL != "" && !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		return fmt.Errorf("llm: --base-url %q must start with http:// or https://", c.BaseURL)
	}
	return nil
}

// Client is a concurrency-bounded chat client.
type Client struct {
	api   *openai.Client
	cfg   Config
	slots chan struct{}

	mu    sync.Mutex
	spent float64
}

// ErrOverBudget is returned, without calling, once BudgetUSD is spent.
var ErrOverBudget = errors.New("over the LLM budget")

// New builds a client.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	if cfg.BaseURL != "" {
		oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	}
	oc.HTTPClient = &retryDoer{client: &http.Client{Timeout: cfg.Timeout}, maxRetries: cfg.MaxRetries, sleep: sleepCtx}
	return &Client{api: openai.NewClientWithConfig(oc), cfg: cfg, slots: make(chan struct{}, cfg.Concurrency)}, nil
}

// Model is the model the client asks.
func (c *Client) Model() string { return c.cfg.Model }

// Reply is one answer with its token counts and cost.
type Reply struct {
	Content          string
	PromptTokens     int
	CompletionTokens int
	CostUSD          float64
}

// Message is one chat message.
type Message struct {
	Role    string // system, user or assistant
	Content string
}

// Chat sends messages and returns the answer. With jsonMode the endpoint is
// asked for a JSON object. It waits for a free slot first.
func (c *Client) Chat(ctx context.Context, msgs []Message, jsonMode bool) (Reply, error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
	defer func() { <-c.slots }()
	if c.overBudget() { // checked holding a slot, so in-flight calls are counted
		return Reply{}, ErrOverBudget
	}
	req := openai.ChatCompletionRequest{Model: c.cfg.Model, Temperature: 0}
	for _, m := range msgs {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
	}
	if jsonMode {
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
	}
	resp, err := c.api.CreateChatCompletion(ctx, req)
	if err != nil {
		return Reply{}, c.redact(fmt.Errorf("llm %s: %w", c.cfg.Model, err))
	}
	if len(resp.Choices) == 0 {
		return Reply{}, fmt.Errorf("llm %s: the answer has no choices", c.cfg.Model)
	}
	r := Reply{Content: resp.Choices[0].Message.Content, PromptTokens: resp.Usage.PromptTokens,
		CompletionTokens: resp.Usage.CompletionTokens}
	if c.cfg.Pricing != nil {
		r.CostUSD = c.cfg.Pricing.Cost(c.cfg.Model, r.PromptTokens, r.CompletionTokens)
	}
	c.mu.Lock()
	c.spent += r.CostUSD
	c.mu.Unlock()
	return r, nil
}

func (c *Client) overBudget() bool {
	if c.cfg.BudgetUSD <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spent >= c.cfg.BudgetUSD
}

// redact removes the API key from an error, whatever echoed it.
func (c *Client) redact(err error) error {
	if err == nil || c.cfg.APIKey == "" || !strings.Contains(err.Error(), c.cfg.APIKey) {
		return err
	}
	return redactedError{msg: strings.ReplaceAll(err.Error(), c.cfg.APIKey, "[redacted]"), cause: err}
}

type redactedError struct {
	msg   string
	cause error
}

func (e redactedError) Error() string { return e.msg }

// Is lets errors.Is see the cause (a deadline, a cancellation) without
// exposing its text.
func (e redactedError) Is(target error) bool { return errors.Is(e.cause, target) }
