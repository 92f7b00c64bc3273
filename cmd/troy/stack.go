package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/streamer"
	"github.com/troy-audit/troy/services/syslog"
)

// stackConfig is what a process needs to reach NATS and run services.
type stackConfig struct {
	client bus.ClientConfig // URL empty: embedded server
	// waitForServer: a service keeps trying its first connection (it may
	// start before NATS); a command fails at once when nothing answers
	waitForServer bool
	dataDir       string
	listen        string // embedded server's client address ("" in-process only)
	targets       []string
	workers       int
	maxRuns       int // agent runs at once (agent-runner)
	limits        trace.Limits
	policy        *policy.Engine // pushed at start; the default for live traces
	reportsDir    string
	reportModes   report.Modes
	replicas      int       // stream and bucket replicas on a cluster
	llm           *llmSetup // nil: the offline explainer
	splunk        splunk.Config
	syslog        syslog.Config
	streamIdle    time.Duration
	streamMember  streamer.Member
	ledger        bool   // the guard and the reporter record their decisions in the ledger
	noProvision   bool   // check the topology instead of provisioning it
	natsAuth      string // the embedded server's users (troy nats-config's auth.conf)
	// the checkpointer's signing key (file or value) and cadence
	ledgerKey          string
	checkpointEvery    uint64
	checkpointInterval time.Duration
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
		s.emb, err = natsembed.Start(natsembed.Config{StoreDir: cfg.dataDir, Listen: cfg.listen, AuthFile: cfg.natsAuth})
		if err != nil {
			return nil, err
		}
		s.nc, err = s.emb.Connect(cfg.client.Name)
	} else {
		cfg.client.Reconnect = true
		cfg.client.WaitForServer = cfg.waitForServer
		s.nc, err = bus.Connect(cfg.client)
	}
	if err != nil {
		s.closeConn()
		return nil, err
	}
	if cfg.waitForServer {
		// a service may start before its server: wait, and say so
		for t := 0; !s.nc.IsConnected(); t++ {
			if t%40 == 0 {
				log.Warn().Str("nats", bus.RedactURL(cfg.client.URL)).Msg("nothing answers at the NATS URL yet; waiting for it (Ctrl-C stops)")
			}
			select {
			case <-ctx.Done():
				s.closeConn()
				return nil, fmt.Errorf("nothing answered at %s: %w", bus.RedactURL(cfg.client.URL), ctx.Err())
			case <-time.After(250 * time.Millisecond):
			}
		}
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
	if cfg.noProvision && s.emb == nil {
		if err := bus.CheckTopology(pctx, s.js, deps.Topology); err != nil {
			s.closeConn()
			return nil, err
		}
	} else if err := bus.Provision(pctx, s.js, deps.Topology); err != nil {
		// a request the user may not make gets no answer: say the refusal
		rerr := bus.Refused(s.nc, err, "$JS.API.")
		s.closeConn()
		if bus.IsPermissionDenied(rerr) {
			return nil, fmt.Errorf("provision: this NATS user may not create or change troy's streams (%v): run with --no-provision, after an operator's troy provision", rerr)
		}
		return nil, fmt.Errorf("%w (is JetStream enabled on the server? a user without the right to provision runs with --no-provision after an operator's troy provision)", err)
	}
	if cfg.policy != nil {
		// pushed before any service starts, so its id resolves everywhere
		store, err := policystore.Open(pctx, s.js)
		if err == nil {
			_, err = store.Ensure(pctx, cfg.policy.Policy(), true)
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
	b := &builder{deps: deps, cfg: cfg, reg: reg, st: st}
	for _, t := range cfg.targets {
		c, ok := lookupComponent(t)
		if !ok {
			return nil, fmt.Errorf("no component %q", t)
		}
		r, err := c.build(ctx, b)
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
