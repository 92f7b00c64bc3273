// Package spec reads agent.yaml / agent.json, the file that describes a
// whole agent run (model, tools, skills, budget, workspace, audit), checks
// every key against the published schema (all problems at once, each with
// its key path) and builds the agent from it.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/datatool"
	"github.com/troy-audit/troy/pkg/agent/guardrails"
	"github.com/troy-audit/troy/pkg/agent/skills"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/llm"
)

// File is an agent configuration.
type File struct {
	Name               string          `json:"name" jsonschema:"minLength=1,maxLength=128,pattern=^[A-Za-z0-9][A-Za-z0-9._-]*$,description=the agent's name in traces and reports"`
	LLM                LLM             `json:"llm"`
	Tools              []string        `json:"tools,omitempty" jsonschema:"uniqueItems=true,description=the built-in tools to offer (default: all; submit is always added)"`
	ToolTimeoutS       int             `json:"tool_timeout_s,omitempty" jsonschema:"minimum=1,maximum=3600,description=time limit of one tool call (default 60)"`
	Skills             *Skills         `json:"skills,omitempty"`
	Budget             Budget          `json:"budget,omitempty"`
	MaxContractRetries *int            `json:"max_contract_retries,omitempty" jsonschema:"minimum=0,maximum=10"`
	Workspace          string          `json:"workspace,omitempty" jsonschema:"description=folder the tools may touch (relative to this file; default: the current directory)"`
	Compaction         *Compaction     `json:"compaction,omitempty"`
	Audit              Audit           `json:"audit,omitempty"`
	Observability      Observability   `json:"observability,omitempty"`
	ProviderPolicy     *ProviderPolicy `json:"provider_policy,omitempty"`
	Cost               Cost            `json:"cost,omitempty"`
	CircuitBreaker     Breaker         `json:"circuit_breaker,omitempty"`
	Guardrails         *Guardrails     `json:"guardrails,omitempty"`
	Governance         Governance      `json:"governance,omitempty"`
	ExtraInstructions  string          `json:"extra_instructions,omitempty"`
	MaxTokensPerCall   int             `json:"max_tokens_per_call,omitempty" jsonschema:"minimum=1"`
}

// LLM is the model the agent runs on.
type LLM struct {
	Provider   string  `json:"provider" jsonschema:"minLength=1,description=openai (any OpenAI-compatible endpoint) or scripted (replays responses from script)"`
	Model      string  `json:"model,omitempty"`
	BaseURL    string  `json:"base_url,omitempty"`
	APIKey     string  `json:"api_key,omitempty" jsonschema:"description=prefer ${OPENAI_API_KEY} to a literal key"`
	Script     string  `json:"script,omitempty" jsonschema:"description=scripted provider: the response file (relative to this file)"`
	TimeoutS   float64 `json:"timeout_s,omitempty" jsonschema:"exclusiveMinimum=0"`
	MaxRetries int     `json:"max_retries,omitempty" jsonschema:"minimum=0,maximum=10"`
}

// Skills says where skills live.
type Skills struct {
	Dirs    []string `json:"dirs,omitempty"`
	Enabled *bool    `json:"enabled,omitempty"`
}

// Budget bounds one run.
type Budget struct {
	MaxIterations          int     `json:"max_iterations,omitempty" jsonschema:"minimum=1"`
	MaxTokens              int     `json:"max_tokens,omitempty" jsonschema:"minimum=1"`
	MaxToolCalls           int     `json:"max_tool_calls,omitempty" jsonschema:"minimum=1"`
	MaxWallSeconds         float64 `json:"max_wall_seconds,omitempty" jsonschema:"exclusiveMinimum=0"`
	MaxConsecutiveFailures int     `json:"max_consecutive_failures,omitempty" jsonschema:"minimum=1"`
}

// Compaction keeps long runs inside the model's context window: at
// trigger_ratio (0.7) of the window (known for common models, else
// 128,000), iterations before the last keep_iterations (3) are summarised.
type Compaction struct {
	ContextWindowTokens int     `json:"context_window_tokens,omitempty" jsonschema:"minimum=1000"`
	TriggerRatio        float64 `json:"trigger_ratio,omitempty" jsonschema:"exclusiveMinimum=0,maximum=1"`
	KeepIterations      int     `json:"keep_iterations,omitempty" jsonschema:"minimum=1"`
	Enabled             *bool   `json:"enabled,omitempty" jsonschema:"description=default true"`
}

// Audit names the policy the run is audited against while it runs.
type Audit struct {
	Policy  string `json:"policy,omitempty" jsonschema:"description=a policy file (relative to this file) or a bundled template name"`
	Enabled *bool  `json:"enabled,omitempty"`
}

// Observability says where events go besides the bus.
type Observability struct {
	EventsFile string `json:"events_file,omitempty" jsonschema:"description=append every event as a JSON line to this file"`
	Console    *bool  `json:"console,omitempty" jsonschema:"description=print one line per event on stderr (default true)"`
	Sinks      []Sink `json:"sinks,omitempty"`
}

// ProviderPolicy limits which providers and models a run may use.
type ProviderPolicy struct {
	AllowedProviders []string            `json:"allowed_providers,omitempty"`
	AllowedModels    map[string][]string `json:"allowed_models,omitempty" jsonschema:"description=provider: the models allowed (a name, or a prefix ending in *)"`
}

// Check refuses a provider or model the policy does not allow.
func (p *ProviderPolicy) Check(provider, model string) error {
	if p == nil {
		return nil
	}
	provider = strings.ToLower(provider)
	if len(p.AllowedProviders) > 0 {
		ok := false
		for _, a := range p.AllowedProviders {
			ok = ok || strings.EqualFold(a, provider)
		}
		if !ok {
			return fmt.Errorf("provider %q is not allowed (allowed: %s)", provider, strings.Join(p.AllowedProviders, ", "))
		}
	}
	for prov, models := range p.AllowedModels {
		if !strings.EqualFold(prov, provider) {
			continue
		}
		for _, m := range models {
			if m == model || (strings.HasSuffix(m, "*") && strings.HasPrefix(model, strings.TrimSuffix(m, "*"))) {
				return nil
			}
		}
		return fmt.Errorf("model %q of provider %s is not allowed (allowed: %s)", model, provider, strings.Join(models, ", "))
	}
	return nil
}

// ParseProviderPolicy reads an operator's policy from two lists:
// providers "openai,scripted" and models "openai:gpt-4o-mini,openai:gpt-4.1*".
func ParseProviderPolicy(providers, models string) (*ProviderPolicy, error) {
	if strings.TrimSpace(providers) == "" && strings.TrimSpace(models) == "" {
		return nil, nil
	}
	p := &ProviderPolicy{AllowedModels: map[string][]string{}}
	for _, v := range strings.Split(providers, ",") {
		if v = strings.TrimSpace(v); v != "" {
			p.AllowedProviders = append(p.AllowedProviders, v)
		}
	}
	for _, v := range strings.Split(models, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		prov, model, ok := strings.Cut(v, ":")
		if !ok || prov == "" || model == "" {
			return nil, fmt.Errorf("allowed model %q: want provider:model", v)
		}
		p.AllowedModels[prov] = append(p.AllowedModels[prov], model)
	}
	return p, nil
}

// Cost prices the run's model calls and bounds its spend.
type Cost struct {
	MaxUSD      float64              `json:"max_usd,omitempty" jsonschema:"exclusiveMinimum=0,description=stop the run (exhausted) once it has spent this much"`
	DailyUSD    float64              `json:"daily_usd,omitempty" jsonschema:"exclusiveMinimum=0,description=what all runs of this agent (by name) may spend per UTC day, across runners"`
	WarnAtRatio float64              `json:"warn_at_ratio,omitempty" jsonschema:"exclusiveMinimum=0,exclusiveMaximum=1,description=warn once at this share of max_usd (default 0.75)"`
	Prices      map[string]llm.Price `json:"prices,omitempty" jsonschema:"description=USD per million tokens by model name (longest prefix matches); over the built-in rate card"`
}

// Breaker stops runs that go nowhere.
type Breaker struct {
	MaxIdenticalToolCalls int `json:"max_identical_tool_calls,omitempty" jsonschema:"minimum=1,description=the same call (tool and arguments) this many times stops the run, blocked (default 4; submit exempt)"`
	MaxStalledIterations  int `json:"max_stalled_iterations,omitempty" jsonschema:"minimum=1,description=this many iterations repeating their step without completing one stop the run, blocked (default 4)"`
}

// Guardrails screen every tool call before it runs and every result
// before the model reads it. On unless enabled: false.
type Guardrails struct {
	Enabled             *bool             `json:"enabled,omitempty"`
	ToolTiers           map[string]string `json:"tool_tiers,omitempty" jsonschema:"description=raise a tool's tier: SAFE, WARNING or DANGER"`
	Downgrade           map[string]string `json:"downgrade,omitempty" jsonschema:"description=set a tool's tier whatever else says (findings still raise it)"`
	SensitiveOperations []string          `json:"sensitive_operations,omitempty" jsonschema:"description=tool or tool:operation, always DANGER"`
	ApprovalThreshold   string            `json:"approval_threshold,omitempty" jsonschema:"enum=WARNING,enum=DANGER,description=from this tier up a call needs approval (default DANGER)"`
	ScanArguments       *bool             `json:"scan_arguments,omitempty"`
	ScanResults         *bool             `json:"scan_results,omitempty"`
	UntrustedResults    string            `json:"untrusted_results,omitempty" jsonschema:"enum=annotate,enum=redact,enum=block,description=what the model gets of a result a scanner flagged (default annotate)"`
	ProtectedPaths      []string          `json:"protected_paths,omitempty" jsonschema:"description=more framework-owned paths (skills, this config and event files always are)"`
	Approver            *Approver         `json:"approver,omitempty"`
	ContentSafety       *ContentSafety    `json:"content_safety,omitempty"`
	// LivePolicy uses the audit policy as a guard before each call
	// (default true).
	LivePolicy    *bool             `json:"live_policy,omitempty"`
	PolicyActions map[string]string `json:"policy_actions,omitempty" jsonschema:"description=rule id: block, escalate or log (overrides the rule's action)"`
}

// ContentSafety classifies arguments and results by what they ask for.
type ContentSafety struct {
	Enabled      *bool             `json:"enabled,omitempty"`
	Provider     string            `json:"provider,omitempty" jsonschema:"enum=keyword,description=keyword: offline phrases (the default)"`
	Dispositions map[string]string `json:"dispositions,omitempty" jsonschema:"description=category (harmful_intent, policy_violation, bias, unsafe_behavior): escalate, fallback or block"`
	FailClosed   bool              `json:"fail_closed,omitempty"`
}

// Approver decides the calls at or above the approval threshold.
type Approver struct {
	Type          string            `json:"type" jsonschema:"enum=auto,enum=deny,enum=terminal,enum=webhook,enum=nats,description=nats: wait on the bus for troy approvals approve|deny (or POST /v1/approvals/{id})"`
	Ceiling       string            `json:"ceiling,omitempty" jsonschema:"enum=SAFE,enum=WARNING,enum=DANGER,description=auto: approve up to this tier"`
	URL           string            `json:"url,omitempty" jsonschema:"pattern=^https?://"`
	Headers       map[string]string `json:"headers,omitempty"`
	TimeoutS      float64           `json:"timeout_s,omitempty" jsonschema:"exclusiveMinimum=0,description=webhook and nats: no decision in time denies (default 300)"`
	PollIntervalS float64           `json:"poll_interval_s,omitempty" jsonschema:"exclusiveMinimum=0"`
}

// Governance limits what a configuration may use.
type Governance struct {
	AllowedTools []string `json:"allowed_tools,omitempty" jsonschema:"description=only these tools (submit is always allowed)"`
}

// Sink sends events to an endpoint as they happen.
type Sink struct {
	Type       string            `json:"type" jsonschema:"enum=http,enum=otlp,description=http: one JSON event per POST to url; otlp: OpenTelemetry logs to url/v1/logs"`
	URL        string            `json:"url" jsonschema:"minLength=1,pattern=^https?://"`
	EventTypes []string          `json:"event_types,omitempty" jsonschema:"description=only these event types (default all)"`
	Headers    map[string]string `json:"headers,omitempty" jsonschema:"description=e.g. Authorization: Bearer ${TOKEN}"`
}

// Error lists every problem of a config file.
type Error struct {
	Source   string
	Problems []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid agent config %s:\n  - %s", e.Source, strings.Join(e.Problems, "\n  - "))
}

// builtins are the tools a config can name; adding one is its type and a
// line here.
var builtins = map[string]func() tools.Tool{
	"analyze_data": func() tools.Tool { return datatool.AnalyzeData{} },
	"execute_code": func() tools.Tool { return tools.ExecuteCode{} },
	"file_system":  func() tools.Tool { return tools.FileSystem{} },
	"load_skill":   func() tools.Tool { return tools.LoadSkill{} },
	"scratchpad":   func() tools.Tool { return tools.Scratchpad{} },
	"submit":       func() tools.Tool { return tools.Submit{} },
}

// ToolNames are the built-in tools, sorted.
var ToolNames = func() []string {
	var out []string
	for n := range builtins {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}()

// Schema is the published JSON Schema of File.
func Schema() *jsonschema.Schema {
	r := &jsonschema.Reflector{AllowAdditionalProperties: false, DoNotReference: true}
	s := r.Reflect(&File{})
	s.Required = []string{"name", "llm"}
	return s
}

var (
	compiled     *sjs.Schema
	compileOnce  sync.Once
	compileError error
)

func validator() (*sjs.Schema, error) {
	compileOnce.Do(func() {
		b, err := json.Marshal(Schema())
		if err != nil {
			compileError = err
			return
		}
		doc, err := sjs.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			compileError = err
			return
		}
		c := sjs.NewCompiler()
		if err = c.AddResource("mem://agent-config.json", doc); err != nil {
			compileError = err
			return
		}
		compiled, compileError = c.Compile("mem://agent-config.json")
	})
	return compiled, compileError
}

// Load reads and checks a config file; relative paths in it are resolved
// against its folder, ${VAR} against the environment (then lookup, e.g. a
// .env file).
func Load(path string, lookup func(string) (string, bool)) (*File, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
	default:
		return nil, fmt.Errorf("agent config %s: unrecognized config extension %q: use .yaml, .yml or .json", path, filepath.Ext(path))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("agent config %s: not found", path)
		}
		return nil, fmt.Errorf("agent config: %w", err)
	}
	doc, err := portable(b, path)
	if err != nil {
		return nil, err
	}
	return Parse(doc, path, lookup)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Resolver gives the value of a ${VAR} reference or a setting.
type Resolver func(name string) (string, bool)

// EnvThen resolves from the environment (set and not empty), then lookup
// (a .env file).
func EnvThen(lookup func(string) (string, bool)) Resolver {
	return func(name string) (string, bool) {
		if v, ok := os.LookupEnv(name); ok && v != "" {
			return v, true
		}
		if lookup != nil {
			return lookup(name)
		}
		return "", false
	}
}

// Only resolves the listed names through r, and no others: a runner that
// takes configs from others exposes only what its operator chose.
func Only(names []string, r Resolver) Resolver {
	allowed := map[string]bool{}
	for _, n := range names {
		allowed[strings.TrimSpace(n)] = true
	}
	return func(name string) (string, bool) {
		if !allowed[name] {
			return "", false
		}
		return r(name)
	}
}

// Parse checks a config document; ${VAR} comes from the environment, then
// lookup.
func Parse(b []byte, source string, lookup func(string) (string, bool)) (*File, error) {
	return ParseWith(b, source, EnvThen(lookup))
}

// ParseWith checks a config document, resolving ${VAR} with resolve only.
func ParseWith(b []byte, source string, resolve Resolver) (*File, error) {
	// Strict: a key given twice is an error, not "the last one wins".
	js, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, &Error{Source: source, Problems: []string{"not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")}}
	}
	var doc any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, &Error{Source: source, Problems: []string{err.Error()}}
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, &Error{Source: source, Problems: []string{"the config must be a mapping of keys (name:, llm:, tools:, …)"}}
	}
	var probs []string
	doc = expand(doc, "", resolve, &probs)
	sch, err := validator()
	if err != nil {
		return nil, fmt.Errorf("agent config schema: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		var ve *sjs.ValidationError
		if errors.As(err, &ve) {
			probs = append(probs, schemaProblems(ve)...)
		} else {
			probs = append(probs, err.Error())
		}
	}
	// the checks beyond the schema run too, so every problem shows at once;
	// a document the schema refused may not decode, and then only says so
	var f File
	nb, _ := json.Marshal(doc)
	if err := json.Unmarshal(nb, &f); err != nil {
		if len(probs) == 0 {
			probs = append(probs, err.Error())
		}
	} else {
		probs = append(probs, f.check()...)
	}
	if len(probs) > 0 {
		sort.Strings(probs)
		probs = slices.Compact(probs)
		return nil, &Error{Source: source, Problems: probs}
	}
	return &f, nil
}

// expand replaces ${VAR} in string values (never in keys, so a variable
// cannot add configuration).
func expand(v any, path string, resolve Resolver, probs *[]string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = expand(e, join(path, k), resolve, probs)
		}
	case []any:
		for i, e := range x {
			x[i] = expand(e, fmt.Sprintf("%s[%d]", path, i), resolve, probs)
		}
	case string:
		return envRef.ReplaceAllStringFunc(x, func(m string) string {
			name := m[2 : len(m)-1]
			if resolve != nil {
				if val, ok := resolve(name); ok {
					return val
				}
			}
			*probs = append(*probs, fmt.Sprintf("%s: ${%s} is not set (in the environment or .env; an agent-runner gives only the variables its TROY_AGENT_ENV lists)", path, name))
			return ""
		})
	}
	return v
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var quoted = regexp.MustCompile(`'([^']*)'`)

// schemaProblems turns the validator's output into "key.path: what is
// wrong" lines.
func schemaProblems(ve *sjs.ValidationError) []string {
	var out []string
	var walk func(u *sjs.OutputUnit)
	walk = func(u *sjs.OutputUnit) {
		if len(u.Errors) == 0 && u.Error != nil {
			loc := strings.ReplaceAll(strings.TrimPrefix(u.InstanceLocation, "/"), "/", ".")
			msg := u.Error.String()
			if strings.HasPrefix(msg, "additional properties") {
				keys := quoted.FindAllStringSubmatch(msg, -1)
				for _, k := range keys {
					out = append(out, fmt.Sprintf("%s: unknown key; allowed: %s", join(loc, k[1]), allowedAt(loc)))
				}
				return
			}
			if loc == "" {
				loc = "(top)"
			}
			out = append(out, loc+": "+msg)
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(ve.BasicOutput())
	return out
}

// allowedAt lists the keys the schema allows at a path.
func allowedAt(loc string) string {
	s := Schema()
	for _, part := range strings.Split(loc, ".") {
		if part == "" {
			continue
		}
		if s.Properties == nil {
			return "(none)"
		}
		p, ok := s.Properties.Get(part)
		if !ok {
			return "(none)"
		}
		s = p
	}
	if s.Properties == nil {
		return "(none)"
	}
	var keys []string
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		keys = append(keys, pair.Key)
	}
	return strings.Join(keys, ", ")
}

// check covers what the schema cannot say.
func (f *File) check() []string {
	var probs []string
	for i, t := range f.Tools {
		if !slices.Contains(ToolNames, t) {
			probs = append(probs, fmt.Sprintf("tools[%d]: %q is not a built-in tool; known: %s", i, t, strings.Join(ToolNames, ", ")))
		}
	}
	switch strings.ToLower(f.LLM.Provider) {
	case "scripted":
		if f.LLM.Script == "" {
			probs = append(probs, "llm.script: the scripted provider needs the file of its responses")
		}
	case "openai":
		if f.LLM.Model == "" {
			probs = append(probs, "llm.model: name the model (e.g. gpt-4o-mini)")
		}
		if u := f.LLM.BaseURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			probs = append(probs, fmt.Sprintf("llm.base_url: %q must start with http:// or https://", u))
		}
	}
	return probs
}

// Deps is what building needs from the caller.
type Deps struct {
	Providers *llm.Providers
	Pricing   *llm.Pricing
	Store     agent.Store
	Sink      agent.Sink
	// Workspace overrides the config's (the --workspace flag).
	Workspace string
	// Settings gives OPENAI_API_KEY and OPENAI_BASE_URL when the config
	// leaves them out (nil: the environment).
	Settings Resolver
	// Approver decides when the config names none (the terminal on a
	// TTY); nil denies.
	Approver guardrails.Approver
	// NATSApprover asks people over the bus (approver type nats), with the
	// config's timeout; nil where there is no bus.
	NATSApprover func(timeout time.Duration) guardrails.Approver
	// Policy is the live guard (the run's audit policy), PolicyRef the
	// policy it resolves, Actions each rule's action from the policy.
	Policy    guard.Guard
	PolicyRef string
	Actions   map[string]string
	// Protected are more framework-owned paths (the config file).
	Protected []string
	// ProviderPolicy is the operator's, checked besides the config's own.
	ProviderPolicy *ProviderPolicy
}

// Build assembles an agent.Config from the file.
func (f *File) Build(d Deps) (agent.Config, error) {
	providers := d.Providers
	if providers == nil {
		providers = llm.DefaultProviders()
	}
	pricing := d.Pricing
	if len(f.Cost.Prices) > 0 {
		prices := map[string]llm.Price{}
		base := llm.DefaultPrices
		if d.Pricing != nil {
			base = d.Pricing.Prices
		}
		for k, v := range base {
			prices[k] = v
		}
		for k, v := range f.Cost.Prices {
			prices[k] = v
		}
		pricing = &llm.Pricing{Prices: prices}
	}
	pc := llm.ProviderConfig{Provider: f.LLM.Provider, Model: f.LLM.Model, BaseURL: f.LLM.BaseURL, APIKey: f.LLM.APIKey,
		Script: f.LLM.Script, Pricing: pricing,
		Client: llm.Config{Timeout: time.Duration(f.LLM.TimeoutS * float64(time.Second)), MaxRetries: f.LLM.MaxRetries, Pricing: pricing}}
	if strings.EqualFold(pc.Provider, "openai") && pc.APIKey == "" {
		// The explainer's settings, when the config leaves the key out. The
		// key only goes where those settings say (OPENAI_BASE_URL, or
		// OpenAI): never to a base_url the config chose.
		settings := d.Settings
		if settings == nil {
			settings = EnvThen(nil)
		}
		home, ok := settings("OPENAI_BASE_URL")
		if !ok {
			home = ""
		}
		if pc.BaseURL == "" {
			pc.BaseURL = home
		}
		if strings.TrimRight(pc.BaseURL, "/") == strings.TrimRight(home, "/") {
			if key, ok := settings("OPENAI_API_KEY"); ok {
				pc.APIKey = key
			}
		}
		if pc.APIKey == "" && pc.BaseURL == "" {
			return agent.Config{}, errors.New("llm: provider openai needs api_key (or OPENAI_API_KEY in the environment or .env), or base_url for a local server")
		}
	}
	// Every client is built here and checked first: no bypass.
	for _, pp := range []*ProviderPolicy{d.ProviderPolicy, f.ProviderPolicy} {
		if err := pp.Check(pc.Provider, pc.Model); err != nil {
			return agent.Config{}, fmt.Errorf("provider policy: %w", err)
		}
	}
	model, err := providers.Build(pc)
	if err != nil {
		return agent.Config{}, fmt.Errorf("llm: %w", err)
	}
	var lib *skills.Library
	if f.Skills != nil && (f.Skills.Enabled == nil || *f.Skills.Enabled) && len(f.Skills.Dirs) > 0 {
		if lib, err = skills.Load(f.Skills.Dirs...); err != nil {
			return agent.Config{}, err
		}
	}
	names := f.Tools
	if len(names) == 0 {
		names = ToolNames
		if lib == nil {
			names = without(names, "load_skill")
		}
	}
	if !slices.Contains(names, "submit") {
		names = append(names, "submit")
	}
	if slices.Contains(names, "load_skill") && lib == nil {
		return agent.Config{}, errors.New("tools: load_skill needs skills: {dirs: [...]}")
	}
	if allowed := f.Governance.AllowedTools; len(allowed) > 0 {
		var outside []string
		for _, n := range names {
			if n != "submit" && !slices.Contains(allowed, n) {
				outside = append(outside, n)
			}
		}
		if len(outside) > 0 {
			return agent.Config{}, fmt.Errorf("governance.allowed_tools does not allow %s: remove them from tools, or allow them", strings.Join(outside, ", "))
		}
	}
	var ts []tools.Tool
	for _, n := range names {
		ts = append(ts, builtins[n]())
	}
	reg, err := tools.NewRegistry(ts...)
	if err != nil {
		return agent.Config{}, err
	}
	if f.ToolTimeoutS > 0 {
		reg.DefaultTimeout = time.Duration(f.ToolTimeoutS) * time.Second
	}
	ws := d.Workspace
	if ws == "" {
		ws = f.Workspace
	}
	if ws == "" {
		ws = "."
	}
	if ws, err = filepath.Abs(ws); err != nil {
		return agent.Config{}, err
	}
	cfg := agent.Config{Name: f.Name, Model: model, Tools: reg, Store: d.Store, Sink: d.Sink, Workspace: ws,
		ExtraInstructions: f.ExtraInstructions, MaxTokensPerCall: f.MaxTokensPerCall,
		Budget: agent.Budget{MaxIterations: f.Budget.MaxIterations, MaxTokens: f.Budget.MaxTokens, MaxToolCalls: f.Budget.MaxToolCalls,
			MaxWall: time.Duration(f.Budget.MaxWallSeconds * float64(time.Second)), MaxConsecutiveFailures: f.Budget.MaxConsecutiveFailures}}
	if lib != nil {
		cfg.Skills = lib
	}
	if gate, err := f.gate(d, ws, lib); err != nil {
		return agent.Config{}, err
	} else if gate != nil {
		cfg.Gate = gate
		cfg.Redact = guardrails.RedactSecrets
	}
	cfg.Breaker = agent.Breaker{MaxUSD: f.Cost.MaxUSD, WarnAtRatio: f.Cost.WarnAtRatio,
		MaxIdenticalToolCalls: f.CircuitBreaker.MaxIdenticalToolCalls, MaxStalledIterations: f.CircuitBreaker.MaxStalledIterations}
	if pricing != nil {
		if p, ok := pricing.Price(model.Model(), llm.Usage{InputTokens: 1_000_000}); ok {
			cfg.Breaker.InputPricePerToken = p / 1e6
		}
	}
	if c := f.Compaction; c != nil {
		cfg.Compaction = agent.Compaction{ContextWindowTokens: c.ContextWindowTokens, TriggerRatio: c.TriggerRatio,
			KeepIterations: c.KeepIterations, Disabled: c.Enabled != nil && !*c.Enabled}
	}
	if f.MaxContractRetries != nil {
		cfg.MaxContractRetries = *f.MaxContractRetries
		if cfg.MaxContractRetries == 0 {
			cfg.MaxContractRetries = -1
		}
	}
	return cfg, nil
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Portable is the config as a run request carries it: relative paths made
// absolute, ${VAR} left for the runner to read from its own environment, so
// no secret travels on the bus or is stored with the session. Check the
// file with Load first.
func Portable(path string) (json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return portable(b, path)
}

// portable makes the paths of a config document absolute (relative to its
// file's folder) and leaves everything else as written: Load parses the
// result, Portable sends it.
func portable(b []byte, path string) (json.RawMessage, error) {
	js, err := yaml.YAMLToJSONStrict(b) // a key given twice is an error
	if err != nil {
		return nil, &Error{Source: path, Problems: []string{"not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")}}
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil || doc == nil {
		return nil, &Error{Source: path, Problems: []string{"the config must be a mapping of keys (name:, llm:, tools:, …)"}}
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	abs := func(v any, isPolicy bool) any {
		p, ok := v.(string)
		if !ok || p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "${") {
			return v
		}
		if isPolicy && !strings.ContainsAny(p, `/\`) && filepath.Ext(p) == "" {
			return v // a template name
		}
		return filepath.Join(dir, p)
	}
	section := func(name string) map[string]any { m, _ := doc[name].(map[string]any); return m }
	if m := section("llm"); m != nil {
		if _, ok := m["script"]; ok {
			m["script"] = abs(m["script"], false)
		}
	}
	if _, ok := doc["workspace"]; ok {
		doc["workspace"] = abs(doc["workspace"], false)
	}
	if m := section("skills"); m != nil {
		if dirs, ok := m["dirs"].([]any); ok {
			for i := range dirs {
				dirs[i] = abs(dirs[i], false)
			}
		}
	}
	if m := section("audit"); m != nil {
		if _, ok := m["policy"]; ok {
			m["policy"] = abs(m["policy"], true)
		}
	}
	if m := section("observability"); m != nil {
		if _, ok := m["events_file"]; ok {
			m["events_file"] = abs(m["events_file"], false)
		}
	}
	return json.Marshal(doc)
}

// GuardrailsOn reports whether calls are screened.
func (f *File) GuardrailsOn() bool {
	return f.Guardrails == nil || f.Guardrails.Enabled == nil || *f.Guardrails.Enabled
}

// gate builds the guardrails (nil when they are off).
func (f *File) gate(d Deps, workspace string, lib *skills.Library) (*guardrails.Gateway, error) {
	if !f.GuardrailsOn() {
		return nil, nil
	}
	g := f.Guardrails
	if g == nil {
		g = &Guardrails{}
	}
	tiers := func(key string, m map[string]string) (map[string]guardrails.Tier, error) {
		out := map[string]guardrails.Tier{}
		for tool, v := range m {
			t, err := guardrails.ParseTier(v)
			if err != nil {
				return nil, fmt.Errorf("guardrails.%s.%s: %w", key, tool, err)
			}
			out[tool] = t
		}
		return out, nil
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	cfg := guardrails.Config{SensitiveOperations: g.SensitiveOperations, UntrustedResults: g.UntrustedResults,
		SkipArguments: g.ScanArguments != nil && !*g.ScanArguments, SkipResults: g.ScanResults != nil && !*g.ScanResults}
	var err error
	if cfg.ToolTiers, err = tiers("tool_tiers", g.ToolTiers); err != nil {
		return nil, err
	}
	if cfg.Downgrade, err = tiers("downgrade", g.Downgrade); err != nil {
		return nil, err
	}
	if g.ApprovalThreshold != "" {
		if cfg.ApprovalThreshold, err = guardrails.ParseTier(g.ApprovalThreshold); err != nil {
			return nil, fmt.Errorf("guardrails.approval_threshold: %w", err)
		}
	}
	// What governs the run is framework-owned: skills, this config, files
	// troy writes events to, and what the caller adds (the ledger).
	if f.Skills != nil {
		cfg.Protected = append(cfg.Protected, f.Skills.Dirs...)
	}
	if f.Observability.EventsFile != "" {
		cfg.Protected = append(cfg.Protected, f.Observability.EventsFile)
	}
	cfg.Protected = append(cfg.Protected, d.Protected...)
	for _, p := range g.ProtectedPaths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(workspace, p)
		}
		cfg.Protected = append(cfg.Protected, p)
	}
	if d.Policy != nil && (g.LivePolicy == nil || *g.LivePolicy) {
		cfg.Policy, cfg.PolicyRef = d.Policy, d.PolicyRef
		cfg.PolicyActions = map[string]string{}
		for k, v := range d.Actions {
			cfg.PolicyActions[k] = v
		}
		for k, v := range g.PolicyActions {
			if v != guardrails.ActionBlock && v != guardrails.ActionEscalate && v != guardrails.ActionLog {
				return nil, fmt.Errorf("guardrails.policy_actions.%s: %q is not block, escalate or log", k, v)
			}
			cfg.PolicyActions[k] = v
		}
	}
	if cs := g.ContentSafety; cs != nil && (cs.Enabled == nil || *cs.Enabled) {
		for cat, disp := range cs.Dispositions {
			if disp != guardrails.Escalate && disp != guardrails.Fallback && disp != guardrails.Block {
				return nil, fmt.Errorf("guardrails.content_safety.dispositions.%s: %q is not escalate, fallback or block", cat, disp)
			}
		}
		cfg.Safety = &guardrails.ContentSafety{Provider: guardrails.KeywordSafety{}, Dispositions: cs.Dispositions, FailClosed: cs.FailClosed}
	}
	approver, err := g.approver(d)
	if err != nil {
		return nil, err
	}
	return guardrails.New(cfg, approver, workspace), nil
}

func (g *Guardrails) approver(d Deps) (guardrails.Approver, error) {
	a := g.Approver
	if a == nil {
		return d.Approver, nil // nil: deny
	}
	switch a.Type {
	case "auto":
		ceiling := guardrails.Warning
		if a.Ceiling != "" {
			t, err := guardrails.ParseTier(a.Ceiling)
			if err != nil {
				return nil, fmt.Errorf("guardrails.approver.ceiling: %w", err)
			}
			ceiling = t
		}
		return guardrails.AllowUpTo{Ceiling: ceiling}, nil
	case "deny":
		return guardrails.DenyAll{}, nil
	case "terminal":
		if d.Approver == nil {
			return guardrails.DenyAll{}, nil // no terminal here: deny
		}
		return d.Approver, nil
	case "nats":
		if d.NATSApprover == nil {
			return nil, errors.New("guardrails.approver: type nats needs troy's bus (troy agent run or an agent-runner)")
		}
		return d.NATSApprover(seconds(a.TimeoutS)), nil
	case "webhook":
		if a.URL == "" {
			return nil, errors.New("guardrails.approver.url: the webhook approver needs a url")
		}
		h := http.Header{}
		for k, v := range a.Headers {
			h.Set(k, v)
		}
		return &guardrails.Webhook{URL: a.URL, Header: h, Timeout: seconds(a.TimeoutS), PollInterval: seconds(a.PollIntervalS)}, nil
	}
	return nil, fmt.Errorf("guardrails.approver.type: %q is not auto, deny, terminal, webhook or nats", a.Type)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// operations are what each built-in tool's discriminating argument takes.
var operations = map[string][]string{
	"file_system":  {"read", "write", "append", "list", "glob", "delete", "mkdir", "stat"},
	"execute_code": {"python", "bash"},
	"scratchpad":   {"read", "write", "delete", "list"},
	"analyze_data": {"profile", "head", "describe", "query", "aggregate", "value_counts", "correlate"},
}

// check refuses what would be accepted and then match nothing.
func (g *Guardrails) check() error {
	tool := func(key, name string) error {
		t, op, hasOp := strings.Cut(name, ":")
		if !slices.Contains(ToolNames, t) {
			return fmt.Errorf("guardrails.%s: %q is not a tool; known: %s", key, t, strings.Join(ToolNames, ", "))
		}
		if hasOp && !slices.Contains(operations[t], op) {
			return fmt.Errorf("guardrails.%s: %q is not an operation of %s; known: %s", key, op, t, strings.Join(operations[t], ", "))
		}
		return nil
	}
	for _, n := range g.SensitiveOperations {
		if err := tool("sensitive_operations", n); err != nil {
			return err
		}
	}
	for key, m := range map[string]map[string]string{"tool_tiers": g.ToolTiers, "downgrade": g.Downgrade} {
		for n := range m {
			if err := tool(key, n); err != nil {
				return err
			}
		}
	}
	for _, p := range g.ProtectedPaths {
		if strings.ContainsAny(p, "*?[") {
			return fmt.Errorf("guardrails.protected_paths: %q: name folders or files, not patterns", p)
		}
	}
	for k, v := range g.PolicyActions {
		if v != guardrails.ActionBlock && v != guardrails.ActionEscalate && v != guardrails.ActionLog {
			return fmt.Errorf("guardrails.policy_actions.%s: %q is not block, escalate or log", k, v)
		}
	}
	if cs := g.ContentSafety; cs != nil {
		for cat := range cs.Dispositions {
			switch cat {
			case guardrails.HarmfulIntent, guardrails.PolicyViolation, guardrails.Bias, guardrails.UnsafeBehavior:
			default:
				return fmt.Errorf("guardrails.content_safety.dispositions: %q is not harmful_intent, policy_violation, bias or unsafe_behavior", cat)
			}
		}
	}
	return nil
}
