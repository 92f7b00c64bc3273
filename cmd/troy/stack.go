package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/explain"
	pguard "github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/natsembed"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/evaluator"
	"github.com/troy-audit/troy/services/explainer"
	"github.com/troy-audit/troy/services/graph"
	guardsvc "github.com/troy-audit/troy/services/guard"
	"github.com/troy-audit/troy/services/ingest"
	"github.com/troy-audit/troy/services/reporter"
	"github.com/troy-audit/troy/services/scorer"
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/streamer"
	"github.com/troy-audit/troy/services/syslog"
)

// targets every `troy serve --target` accepts, in pipeline order.
var allTargets = []string{"ingest", "graph", "evaluator", "explainer", "scorer", "reporter", "streamer", "guard"}

// pipelineTargets are the audit stages: what troy audit runs in-process.
var pipelineTargets = allTargets[:6]

// forwarderTargets send findings to SIEMs; they need a destination, so
// "all" does not include them: name them.
var forwarderTargets = []string{"splunk", "syslog"}

func parseTargets(s string) ([]string, error) {
	if s == "" || s == "all" {
		return allTargets, nil
	}
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "all" {
			out = append(out, allTargets...)
			continue
		}
		if !slices.Contains(allTargets, t) && !slices.Contains(forwarderTargets, t) {
			return nil, fmt.Errorf("--target %q: want all or one or more of %s", t, strings.Join(append(slices.Clone(allTargets), forwarderTargets...), ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// stackConfig is what a process needs to reach NATS and run services.
type stackConfig struct {
	client      bus.ClientConfig // URL empty: embedded server
	dataDir     string
	listen      string // embedded server's client address ("" in-process only)
	targets     []string
	workers     int
	limits      trace.Limits
	policy      *policy.Engine // pushed at start; the default for live traces
	reportsDir  string
	reportModes report.Modes
	replicas    int       // stream and bucket replicas on a cluster
	llm         *llmSetup // nil: the offline explainer
	splunk      splunk.Config
	syslog      syslog.Config
	streamIdle  time.Duration
}

// stack is a NATS connection (and maybe an embedded server) plus the
// services this process runs. Every target is built exactly as its own
// `troy serve --target` builds it.
type stack struct {
	emb    *natsembed.Server
	nc     *nats.Conn
	guard  pguard.Guard // when this process runs the guard target
	js     jetstream.JetStream
	log    zerolog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
	failed chan struct{}
}

func startStack(ctx context.Context, cfg stackConfig, log zerolog.Logger, reg prometheus.Registerer) (*stack, error) {
	s := &stack{log: log, failed: make(chan struct{})}
	var err error
	if cfg.client.URL == "" {
		s.emb, err = natsembed.Start(natsembed.Config{StoreDir: cfg.dataDir, Listen: cfg.listen})
		if err != nil {
			return nil, err
		}
		s.nc, err = s.emb.Connect(cfg.client.Name)
	} else {
		cfg.client.Reconnect = true
		s.nc, err = bus.Connect(cfg.client)
	}
	if err != nil {
		s.closeConn()
		return nil, err
	}
	if s.js, err = bus.JetStream(s.nc); err != nil {
		s.closeConn()
		return nil, err
	}
	deps, err := bus.NewDeps(s.js, log, reg)
	if err != nil {
		s.closeConn()
		return nil, err
	}
	deps.Topology.Replicas = cfg.replicas
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.Provision(pctx, s.js, deps.Topology); err != nil {
		s.closeConn()
		return nil, fmt.Errorf("%w (is JetStream enabled on the server?)", err)
	}
	if cfg.policy != nil {
		// pushed before any service starts, so its id resolves everywhere
		store, err := policystore.Open(pctx, s.js)
		if err == nil {
			_, err = store.Push(pctx, cfg.policy.Policy())
		}
		if err != nil {
			s.closeConn()
			return nil, err
		}
	}
	runners, err := s.buildServices(pctx, deps, cfg, reg)
	if err != nil {
		s.closeConn()
		return nil, err
	}
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = rcancel
	for name, r := range runners {
		s.wg.Go(func() {
			if err := r(rctx); err != nil && rctx.Err() == nil {
				s.fail(fmt.Errorf("service %s stopped: %w", name, err))
			}
		})
	}
	return s, nil
}

type runFunc func(context.Context) error

func (st *stack) buildServices(ctx context.Context, deps bus.Deps, cfg stackConfig, reg prometheus.Registerer) (map[string]runFunc, error) {
	out := map[string]runFunc{}
	workers := func(def int) int {
		if cfg.workers > 0 {
			return cfg.workers
		}
		return def
	}
	for _, t := range cfg.targets {
		var r runFunc
		var err error
		switch t {
		case "ingest":
			c := ingest.DefaultConfig()
			c.Workers = workers(c.Workers)
			if cfg.limits != (trace.Limits{}) {
				c.Limits = cfg.limits
			}
			var s *ingest.Service
			s, err = ingest.New(deps, c)
			r = runOf(s, err)
		case "graph":
			c := graph.DefaultConfig()
			c.Workers = workers(c.Workers)
			var s *graph.Service
			s, err = graph.New(deps, c)
			r = runOf(s, err)
		case "evaluator":
			c := evaluator.DefaultConfig()
			c.Workers = workers(c.Workers)
			if cfg.policy != nil {
				c.DefaultPolicy = cfg.policy.Policy().PolicyID
			}
			c.Version = version
			var s *evaluator.Service
			s, err = evaluator.New(ctx, deps, c)
			r = runOf(s, err)
		case "explainer":
			c := explainer.DefaultConfig()
			c.Workers = workers(c.Workers)
			if cfg.llm != nil {
				if c.Explainer, err = newLLMExplainer(ctx, deps, cfg.llm); err != nil {
					return nil, err
				}
			}
			var s *explainer.Service
			s, err = explainer.New(deps, c)
			r = runOf(s, err)
		case "scorer":
			c := scorer.DefaultConfig()
			c.Workers = workers(c.Workers)
			var s *scorer.Service
			s, err = scorer.New(deps, c)
			r = runOf(s, err)
		case "reporter":
			c := reporter.DefaultConfig()
			c.Workers = workers(c.Workers)
			c.Dir = cfg.reportsDir
			if cfg.reportModes.File != 0 {
				c.Modes = cfg.reportModes
			}
			var s *reporter.Service
			s, err = reporter.New(ctx, deps, c)
			r = runOf(s, err)
		case "streamer":
			c := streamer.DefaultConfig()
			c.Workers = workers(c.Workers)
			c.Version = version
			if cfg.streamIdle > 0 {
				c.IdleTimeout = cfg.streamIdle
			}
			if cfg.policy != nil {
				c.DefaultPolicy = cfg.policy.Policy().PolicyID
			}
			var s *streamer.Service
			s, err = streamer.New(ctx, deps, c)
			r = runOf(s, err)
		case "splunk":
			var s *splunk.Service
			s, err = splunk.New(deps, cfg.splunk)
			r = runOf(s, err)
		case "syslog":
			var s *syslog.Service
			s, err = syslog.New(deps, cfg.syslog)
			r = runOf(s, err)
		case "guard":
			c := guardsvc.DefaultConfig()
			if cfg.policy != nil {
				c.DefaultPolicy = cfg.policy.Policy().PolicyID
			}
			var s *guardsvc.Service
			s, err = guardsvc.New(ctx, st.nc, deps, reg, c)
			r = runOf(s, err)
			if err == nil {
				st.guard = s.Guard()
			}
		}
		if err != nil {
			return nil, err
		}
		out[t] = r
	}
	return out, nil
}

func newLLMExplainer(ctx context.Context, deps bus.Deps, s *llmSetup) (*explain.LLM, error) {
	client, err := llm.New(s.cfg)
	if err != nil {
		return nil, err
	}
	cache, err := explain.OpenKVCache(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	return &explain.LLM{Client: client, Cache: cache}, nil
}

func runOf[S interface{ Run(context.Context) error }](s S, err error) runFunc {
	if err != nil {
		return nil
	}
	return s.Run
}

func (s *stack) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.failed)
	}
	s.log.Error().Err(err).Msg("service failed")
}

// Failed is closed when a service stops with an error.
func (s *stack) Failed() <-chan struct{} { return s.failed }

// Err is the first service failure.
func (s *stack) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close stops the services (letting in-flight messages finish), drains the
// connection and stops the embedded server, all within grace.
func (s *stack) Close(grace time.Duration) error {
	done := make(chan struct{})
	go func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		s.closeConn()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(grace):
		return errors.New("shutdown did not finish within the grace period; unacknowledged messages will be redelivered")
	}
}

func (s *stack) closeConn() {
	if s.nc != nil {
		closed := make(chan struct{})
		s.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := s.nc.Drain(); err == nil {
			select { // Drain flushes pending publishes, then closes
			case <-closed:
			case <-time.After(10 * time.Second):
			}
		}
		s.nc.Close()
	}
	if s.emb != nil {
		s.emb.Shutdown()
	}
}
