package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/agentrunner"
	"github.com/troy-audit/troy/services/checkpointer"
	"github.com/troy-audit/troy/services/evaluator"
	"github.com/troy-audit/troy/services/explainer"
	"github.com/troy-audit/troy/services/graph"
	"github.com/troy-audit/troy/services/guardserver"
	"github.com/troy-audit/troy/services/ingest"
	"github.com/troy-audit/troy/services/reporter"
	"github.com/troy-audit/troy/services/scorer"
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/streamer"
	"github.com/troy-audit/troy/services/syslog"
)

// Kinds of component.
const (
	kindStage     = "stage"     // an audit pipeline stage: troy audit runs these in-process
	kindService   = "service"   // runs beside the pipeline (streaming, the guard)
	kindForwarder = "forwarder" // sends findings to a SIEM; needs a destination, so "all" leaves it out
)

// component is one thing `troy serve --target` can run. Every target is
// built by its factory, the same way whether it runs alone or with others.
type component struct {
	name, kind, help string
	build            func(ctx context.Context, b *builder) (runFunc, error)
}

// builder is what a factory builds from.
type builder struct {
	deps bus.Deps
	cfg  stackConfig
	reg  prometheus.Registerer
	st   *stack
}

// workers is the handler count: --workers when given, else the service's.
func (b *builder) workers(def int) int {
	if b.cfg.workers > 0 {
		return b.cfg.workers
	}
	return def
}

// defaultPolicy is the id of serve's --policy, or "".
func (b *builder) defaultPolicy() string {
	if b.cfg.policy == nil {
		return ""
	}
	return b.cfg.policy.Policy().PolicyID
}

// components is the registry, in pipeline order.
var components = []component{
	{"ingest", kindStage, "raw documents → canonical traces or rejections", func(ctx context.Context, b *builder) (runFunc, error) {
		c := ingest.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		if b.cfg.limits != (trace.Limits{}) {
			c.Limits = b.cfg.limits
		}
		return runOf(ingest.New(b.deps, c))
	}},
	{"graph", kindStage, "execution graphs", func(ctx context.Context, b *builder) (runFunc, error) {
		c := graph.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		return runOf(graph.New(b.deps, c))
	}},
	{"evaluator", kindStage, "policy evaluation and OCSF findings", func(ctx context.Context, b *builder) (runFunc, error) {
		c := evaluator.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		c.DefaultPolicy = b.defaultPolicy()
		c.Version = version
		return runOf(evaluator.New(ctx, b.deps, c))
	}},
	{"explainer", kindStage, "step explanations (LLM or offline)", func(ctx context.Context, b *builder) (runFunc, error) {
		c := explainer.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		if b.cfg.llm != nil {
			e, err := newLLMExplainer(ctx, b.deps, b.cfg.llm)
			if err != nil {
				return nil, err
			}
			c.Explainer = e
		}
		return runOf(explainer.New(b.deps, c))
	}},
	{"scorer", kindStage, "risk scores", func(ctx context.Context, b *builder) (runFunc, error) {
		c := scorer.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		return runOf(scorer.New(b.deps, c))
	}},
	{"reporter", kindStage, "reports (and --reports-dir files)", func(ctx context.Context, b *builder) (runFunc, error) {
		c := reporter.DefaultConfig()
		c.Workers = b.workers(c.Workers)
		c.Dir = b.cfg.reportsDir
		if b.cfg.reportModes.File != 0 {
			c.Modes = b.cfg.reportModes
		}
		if b.cfg.ledger {
			c.Ledger = ledger.InstanceID("reporter")
		}
		return runOf(reporter.New(ctx, b.deps, c))
	}},
	{"streamer", kindService, "streaming audit of steps sent as they happen", func(ctx context.Context, b *builder) (runFunc, error) {
		c := streamer.DefaultConfig()
		c.Version = version
		c.Registerer = b.reg
		c.Member = b.cfg.streamMember
		if b.cfg.streamIdle > 0 {
			c.IdleTimeout = b.cfg.streamIdle
		}
		c.DefaultPolicy = b.defaultPolicy()
		return runOf(streamer.New(ctx, b.deps, c))
	}},
	{"guard", kindService, "action checks over NATS and HTTP", func(ctx context.Context, b *builder) (runFunc, error) {
		c := guardserver.DefaultConfig()
		c.DefaultPolicy = b.defaultPolicy()
		if b.cfg.ledger {
			c.Ledger = ledger.InstanceID("guard")
		}
		s, err := guardserver.New(ctx, b.st.nc, b.deps, b.reg, c)
		if err != nil {
			return nil, err
		}
		b.st.guard = s.Guard()
		return s.Run, nil
	}},
	{"checkpointer", kindService, "signed checkpoints of the decision ledger (needs --ledger-key)", func(ctx context.Context, b *builder) (runFunc, error) {
		c := checkpointer.DefaultConfig()
		c.Key = b.cfg.ledgerKey
		if b.cfg.checkpointEvery > 0 {
			c.Every = b.cfg.checkpointEvery
		}
		if b.cfg.checkpointInterval > 0 {
			c.Interval = b.cfg.checkpointInterval
		}
		c.Registerer = b.reg
		return runOf(checkpointer.New(b.deps, c))
	}},
	{"agent-runner", kindService, "governed agent runs from the troy.agent.run work queue", func(ctx context.Context, b *builder) (runFunc, error) {
		c := agentrunner.DefaultConfig()
		if b.cfg.workers > 0 {
			c.Workers = b.cfg.workers
		}
		if b.cfg.maxRuns > 0 {
			c.Workers = b.cfg.maxRuns
		}
		pp, err := operatorProviderPolicy()
		if err != nil {
			return nil, err
		}
		c.ProviderPolicy = pp
		c.WorkspaceRoot = os.Getenv("TROY_AGENT_WORKSPACE_ROOT")
		c.Partitions = bus.StreamPartitions(b.deps.Topology)
		settings := spec.EnvThen(dotEnvLookup())
		c.Env = spec.Only(strings.Split(os.Getenv("TROY_AGENT_ENV"), ","), settings)
		c.Settings = settings
		c.Registerer = b.reg
		return runOf(agentrunner.New(ctx, b.deps, b.st.nc, c))
	}},
	{"splunk", kindForwarder, "findings to a Splunk HTTP Event Collector", func(ctx context.Context, b *builder) (runFunc, error) {
		return runOf(splunk.New(b.deps, b.cfg.splunk))
	}},
	{"syslog", kindForwarder, "findings as CEF over syslog", func(ctx context.Context, b *builder) (runFunc, error) {
		return runOf(syslog.New(b.deps, b.cfg.syslog))
	}},
}

// componentNames lists the registered components of the given kinds.
func componentNames(kinds ...string) []string {
	var out []string
	for _, c := range components {
		if slices.Contains(kinds, c.kind) {
			out = append(out, c.name)
		}
	}
	return out
}

func lookupComponent(name string) (component, bool) {
	for _, c := range components {
		if c.name == name {
			return c, true
		}
	}
	return component{}, false
}

// targetHelp is the --target flag's help, from the registry.
func targetHelp() string {
	var b strings.Builder
	b.WriteString("services to run: all (")
	b.WriteString(strings.Join(componentNames(kindStage, kindService), ", "))
	b.WriteString("), or a comma list of them and of the SIEM forwarders (")
	b.WriteString(strings.Join(componentNames(kindForwarder), ", "))
	b.WriteString("), which all leaves out (env TROY_TARGET)")
	return b.String()
}

// parseTargets reads --target: "all", or a comma list of component names.
func parseTargets(s string) ([]string, error) {
	all := componentNames(kindStage, kindService)
	if s == "" || s == "all" {
		return all, nil
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "all" {
			out = append(out, all...)
			continue
		}
		if _, ok := lookupComponent(t); !ok {
			return nil, fmt.Errorf("--target %q: want all or one or more of %s", t, strings.Join(componentNames(kindStage, kindService, kindForwarder), ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// runOf adapts a service constructor's result to a runFunc.
func runOf[S interface{ Run(context.Context) error }](s S, err error) (runFunc, error) {
	if err != nil {
		return nil, err
	}
	return s.Run, nil
}

// operatorProviderPolicy is the operator's limit on providers and models
// (TROY_AGENT_ALLOWED_PROVIDERS="openai", TROY_AGENT_ALLOWED_MODELS=
// "openai:gpt-4o-mini,openai:gpt-4.1*"), checked for every run besides its
// config's own.
func operatorProviderPolicy() (*spec.ProviderPolicy, error) {
	p, err := spec.ParseProviderPolicy(os.Getenv("TROY_AGENT_ALLOWED_PROVIDERS"), os.Getenv("TROY_AGENT_ALLOWED_MODELS"))
	if err != nil {
		return nil, fmt.Errorf("TROY_AGENT_ALLOWED_MODELS: %w", err)
	}
	return p, nil
}
