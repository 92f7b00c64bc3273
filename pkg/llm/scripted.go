package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Provider is a model that completes conversations with tools.
type Provider interface {
	Complete(ctx context.Context, req Request) (Completion, error)
	Model() string
}

// ProviderConfig is the `llm:` block of an agent config.
type ProviderConfig struct {
	Provider string
	Model    string
	BaseURL  string
	APIKey   string
	// Script is the scripted provider's response file.
	Script  string
	Client  Config // timeouts, retries, pricing for HTTP providers
	Pricing *Pricing
}

// Factory builds a provider from its config.
type Factory func(ProviderConfig) (Provider, error)

// Providers chooses a provider by name; names are case-insensitive and a
// program may register its own.
type Providers struct{ m map[string]Factory }

// DefaultProviders knows "openai" (any OpenAI-compatible endpoint) and
// "scripted" (replays a response file: tests and the offline example).
func DefaultProviders() *Providers {
	p := &Providers{m: map[string]Factory{}}
	p.Register("openai", func(c ProviderConfig) (Provider, error) {
		cfg := c.Client
		cfg.Model, cfg.BaseURL, cfg.APIKey = c.Model, c.BaseURL, c.APIKey
		if cfg.Pricing == nil {
			cfg.Pricing = c.Pricing
		}
		return New(cfg)
	})
	p.Register("scripted", func(c ProviderConfig) (Provider, error) {
		if c.Script == "" {
			return nil, fmt.Errorf("the scripted provider needs `script: FILE` with its responses")
		}
		s, err := LoadScript(c.Script)
		if err != nil {
			return nil, err
		}
		if c.Model != "" {
			s.ModelName = c.Model
		}
		s.Pricing = c.Pricing
		return s, nil
	})
	return p
}

// Register adds or replaces a provider.
func (p *Providers) Register(name string, f Factory) { p.m[strings.ToLower(name)] = f }

// Names are the registered providers, sorted.
func (p *Providers) Names() []string {
	var out []string
	for n := range p.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Build makes the provider the config names.
func (p *Providers) Build(c ProviderConfig) (Provider, error) {
	f, ok := p.m[strings.ToLower(c.Provider)]
	if !ok {
		return nil, fmt.Errorf("unknown llm provider %q; known: %s", c.Provider, strings.Join(p.Names(), ", "))
	}
	return f(c)
}

// ScriptedResponse is one answer of a scripted model.
type ScriptedResponse struct {
	Text      string           `json:"text,omitempty"`
	ToolCalls []ScriptedCall   `json:"tool_calls,omitempty"`
	Usage     Usage            `json:"usage,omitempty"`
	Error     *ScriptedFailure `json:"error,omitempty"`
}

// ScriptedCall is a tool call in a script; arguments are any YAML value.
type ScriptedCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

// ScriptedFailure makes a scripted call fail as a provider would.
type ScriptedFailure struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// Scripted replays fixed responses in order and records every request. It
// is a real provider (the offline example runs on it), not a test double:
// running out of responses is an error like any provider's.
type Scripted struct {
	ModelName string
	Responses []ScriptedResponse
	Pricing   *Pricing
	// OnCall runs before answering call i (0-based); tests use it to act
	// while a call is in flight.
	OnCall func(i int, req Request)

	mu    sync.Mutex
	calls []Request
}

// LoadScript reads a YAML or JSON file: `model:` and `responses:`.
func LoadScript(path string) (*Scripted, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted provider: %w", err)
	}
	var doc struct {
		Model     string             `json:"model"`
		Responses []ScriptedResponse `json:"responses"`
	}
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		return nil, fmt.Errorf("scripted provider: %s: %w", path, err)
	}
	if len(doc.Responses) == 0 {
		return nil, fmt.Errorf("scripted provider: %s has no `responses:`", path)
	}
	if doc.Model == "" {
		doc.Model = "scripted"
	}
	return &Scripted{ModelName: doc.Model, Responses: doc.Responses}, nil
}

// Model implements Provider.
func (s *Scripted) Model() string {
	if s.ModelName == "" {
		return "scripted"
	}
	return s.ModelName
}

// Calls are the requests received so far.
func (s *Scripted) Calls() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.calls...)
}

// Complete implements Provider.
func (s *Scripted) Complete(ctx context.Context, req Request) (Completion, error) {
	if err := ctx.Err(); err != nil {
		return Completion{}, err
	}
	s.mu.Lock()
	i := len(s.calls)
	req.Turns = append([]Turn(nil), req.Turns...)
	s.calls = append(s.calls, req)
	s.mu.Unlock()
	if s.OnCall != nil {
		s.OnCall(i, req)
	}
	if i >= len(s.Responses) {
		return Completion{}, fmt.Errorf("scripted model: the script has %d responses and call %d has none", len(s.Responses), i+1)
	}
	r := s.Responses[i]
	if r.Error != nil {
		return Completion{}, &StatusError{StatusCode: r.Error.Status, Err: fmt.Errorf("scripted model: %s", r.Error.Message)}
	}
	out := Completion{Text: r.Text, Usage: r.Usage, Model: s.Model()}
	if out.Usage == (Usage{}) { // a rough count, so budgets and reports have something
		out.Usage = Usage{InputTokens: 100, OutputTokens: len(r.Text)/4 + 10}
	}
	for j, c := range r.ToolCalls {
		args, err := json.Marshal(c.Arguments)
		if err != nil {
			return Completion{}, fmt.Errorf("scripted model: response %d call %d: %w", i+1, j+1, err)
		}
		if c.Arguments == nil {
			args = json.RawMessage(`{}`)
		}
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", i+1, j+1)
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: id, Name: c.Name, Arguments: args})
	}
	out.Priced = true // a script costs nothing, and that is its price
	if s.Pricing != nil {
		out.CostUSD, out.Priced = s.Pricing.Price(s.Model(), out.Usage)
	}
	return out, nil
}
