package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/troy-audit/troy/pkg/llm"
)

// llmFlags configure the LLM explainer. Precedence: flags, then the
// environment (TROY_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY), then a .env file
// in the working directory.
type llmFlags struct {
	model, baseURL, apiKey string
	concurrency            int
	timeout                time.Duration
	budget                 float64
	prices                 string
}

func (f *llmFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.model, "model", "m", "", "LLM for explanations (env TROY_MODEL; default "+llm.DefaultModel+")")
	fl.StringVar(&f.baseURL, "base-url", "", "OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (env OPENAI_BASE_URL)")
	fl.StringVar(&f.apiKey, "api-key", "", "API key (env OPENAI_API_KEY; prefer the environment or .env to a flag)")
	fl.IntVar(&f.concurrency, "llm-concurrency", 16, "LLM calls in flight at once")
	fl.DurationVar(&f.timeout, "llm-timeout", 60*time.Second, "timeout of one LLM request")
	fl.Float64Var(&f.budget, "llm-budget-usd", 0, "stop calling the LLM once explanations cost this much (0: no limit); the rest are heuristic")
	fl.StringVar(&f.prices, "llm-prices", "", "YAML/JSON file of model prices, USD per million tokens: {model: {input: 0.15, output: 0.6}}")
}

// llmSetup is what the explainer stage is built from.
type llmSetup struct{ cfg llm.Config }

// resolve applies the precedence and returns nil when no LLM is configured.
func (f *llmFlags) resolve(cmd *cobra.Command, stderr io.Writer) (*llmSetup, error) {
	dotenv, err := readDotEnv(".env")
	if err != nil {
		return nil, err
	}
	pick := func(flag, value, env string) string {
		if cmd.Flags().Changed(flag) {
			return value
		}
		if v := os.Getenv(env); v != "" {
			return v
		}
		return dotenv[env]
	}
	cfg := llm.Config{
		Model:       pick("model", f.model, "TROY_MODEL"),
		BaseURL:     pick("base-url", f.baseURL, "OPENAI_BASE_URL"),
		APIKey:      pick("api-key", f.apiKey, "OPENAI_API_KEY"),
		Timeout:     f.timeout,
		Concurrency: f.concurrency,
	}
	if !cfg.Enabled() {
		fmt.Fprintln(stderr, "troy: no LLM configured (set OPENAI_API_KEY, or --base-url for a local server); explaining steps offline with heuristics")
		return nil, nil
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prices := llm.DefaultPrices
	if f.prices != "" {
		b, err := os.ReadFile(f.prices)
		if err != nil {
			return nil, fmt.Errorf("--llm-prices: %w", err)
		}
		prices = map[string]llm.Price{}
		if err := yaml.UnmarshalStrict(b, &prices); err != nil {
			return nil, fmt.Errorf("--llm-prices %s: want {model: {input: USD per 1M tokens, output: …}}: %w", f.prices, err)
		}
	}
	cfg.Pricing = &llm.Pricing{Prices: prices, Warn: func(model string) {
		fmt.Fprintf(stderr, "troy: no price known for model %q: its cost is counted as 0 (add it with --llm-prices)\n", model)
	}}
	cfg.BudgetUSD = f.budget
	return &llmSetup{cfg: cfg}, nil
}

// readDotEnv reads KEY=VALUE lines; a missing file is no error.
func readDotEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf(".env: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return nil, fmt.Errorf(".env line %d: want KEY=VALUE", n)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, sc.Err()
}

// dotEnvLookup reads ${VAR} references of agent configs from ./.env after
// the environment (the same precedence as the explainer's settings).
func dotEnvLookup() func(string) (string, bool) {
	env, err := readDotEnv(".env")
	if err != nil {
		return func(string) (string, bool) { return "", false }
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}
