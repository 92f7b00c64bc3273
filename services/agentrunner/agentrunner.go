// Package agentrunner is the service that runs governed agents from the
// work queue: it takes a run request from troy.agent.run, runs it (keeping
// the message in progress meanwhile), and publishes the result on
// troy.agent.result.<run_id>. A runner that dies mid-run leaves the request
// to be redelivered; the next runner goes on with the run's session.
package agentrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus"
)

// Consumer is the durable consumer this service reads.
const Consumer = pipelines.ConsumerAgentRunner

// Consumes lists the subjects this service reads.
var Consumes = []string{agentrun.SubjectRun}

// Produces lists the pipeline stages this service publishes to: none (a
// run's events, steps and result go out through pkg/agentrun).
var Produces = []string{}

// Config tunes the service.
type Config struct {
	// Workers is how many runs one process drives at once.
	Workers int
	// MaxRun bounds one run, whatever its config's budget says.
	MaxRun time.Duration
	// Partitions of the streamed-trace subjects (the topology's).
	Partitions int
	// Env resolves ${VAR} in queued configs: only the variables the
	// operator listed (TROY_AGENT_ENV), since anyone who can queue a run
	// chooses where its config sends them.
	Env spec.Resolver
	// Settings gives OPENAI_API_KEY / OPENAI_BASE_URL to configs that
	// leave them out (the key only to that base URL).
	Settings spec.Resolver
	// Registerer takes the agent metrics (nil: none).
	Registerer prometheus.Registerer
	// ProviderPolicy is the operator's limit on providers and models.
	ProviderPolicy *spec.ProviderPolicy
	// WorkspaceRoot confines queued runs' workspaces ("" : anywhere).
	WorkspaceRoot string
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Workers: 4, MaxRun: time.Hour, Partitions: 8} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("agent-runner: workers must be at least 1, got %d", c.Workers)
	}
	if c.MaxRun <= 0 {
		return fmt.Errorf("agent-runner: max run time must be positive, got %s", c.MaxRun)
	}
	return nil
}

// Service is the agent runner.
type Service struct {
	deps   bus.Deps
	cfg    Config
	runner *agentrun.Runner
	nc     *nats.Conn
	runCtx atomic.Pointer[context.Context]
}

// New builds the service; nc receives cancel requests (core NATS).
func New(ctx context.Context, deps bus.Deps, nc *nats.Conn, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := agentrun.New(ctx, deps.JS, cfg.Partitions, deps.Log.With().Str("service", "agent-runner").Logger())
	if err != nil {
		return nil, err
	}
	r.Env, r.Settings, r.ProviderPolicy, r.WorkspaceRoot = cfg.Env, cfg.Settings, cfg.ProviderPolicy, cfg.WorkspaceRoot
	host, _ := os.Hostname()
	r.WriterName = fmt.Sprintf("agent-runner@%s/%d", host, os.Getpid())
	if cfg.Registerer != nil {
		if r.Metrics, err = agentrun.NewMetrics(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	s := &Service{deps: deps, cfg: cfg, runner: r, nc: nc}
	r.Stopping = func() bool {
		c := s.runCtx.Load()
		return c != nil && (*c).Err() != nil
	}
	return s, nil
}

// Run consumes until ctx is cancelled, on watermill's router. A run that
// the shutdown interrupts is left to be redelivered to another runner.
func (s *Service) Run(ctx context.Context) error {
	s.runCtx.Store(&ctx)
	return bus.RunRouterStage(ctx, s.deps, Consumer, s.cfg.Workers, s.Handle, bus.WithTimeout(s.cfg.MaxRun))
}

// Handle runs one request to its end.
func (s *Service) Handle(m *message.Message) ([]*message.Message, error) {
	var req agentrun.Request
	if err := json.Unmarshal(m.Payload, &req); err != nil {
		return nil, bus.Permanent(fmt.Errorf("run request is not JSON of {run_id, session_id, goal, config, …}: %w", err))
	}
	ctl := &agent.Control{}
	if s.nc != nil && agentrun.ValidID(req.RunID) {
		sub, err := s.nc.Subscribe(agentrun.CancelPrefix+req.RunID, func(msg *nats.Msg) {
			reason := string(msg.Data)
			if reason == "" {
				reason = "cancelled by request"
			}
			ctl.Cancel(reason)
			if bus.IsInbox(msg.Reply) { // answered only to a requester's inbox
				_ = msg.Respond([]byte("ok"))
			}
		})
		if err != nil { // a run nobody could cancel is not started
			return nil, fmt.Errorf("subscribing to cancels of run %s: %w", req.RunID, err)
		}
		defer sub.Unsubscribe()
	}
	out, err := s.runner.Execute(m.Context(), req, ctl, nil)
	switch {
	case errors.Is(err, agentrun.ErrBadRequest):
		return nil, bus.Permanent(err)
	case err != nil:
		return nil, err
	}
	s.deps.Log.Info().Str("run_id", out.RunID).Str("session_id", out.SessionID).Str("status", string(out.Status)).
		Int("iterations", out.Iterations).Msg("agent run ended")
	return nil, nil
}
