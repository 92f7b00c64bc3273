// Package guardserver is the service that answers guard checks over NATS
// request-reply on troy.guard.check: is this proposed action allowed?
package guardserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pkg/bus"
	pguard "github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
)

// Queue is the queue group: each check goes to one guard process.
const Queue = "guard"

// Config tunes the service.
type Config struct {
	// DefaultPolicy (an id or sha256: hash) serves requests that name none.
	DefaultPolicy string
	// CheckTimeout bounds one check; past it the check blocks. It is
	// below the clients' default timeout (2 s), so a slow check is answered
	// "block" rather than read as an unreachable guard.
	CheckTimeout time.Duration
	// Workers is how many checks run at once.
	Workers int
	// Ledger, when set, is the ledger this process records every decision
	// in (ledger.InstanceID("guard")); a decision that cannot be recorded
	// blocks.
	Ledger string
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{CheckTimeout: 1500 * time.Millisecond, Workers: 8} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.CheckTimeout < 0 || c.Workers < 0 {
		return fmt.Errorf("guard: check timeout and workers must not be negative")
	}
	return nil
}

// Service is the guard.
type Service struct {
	nc      *nats.Conn
	deps    bus.Deps
	local   *pguard.Local
	store   *policystore.Store
	checks  *prometheus.CounterVec
	took    prometheus.Histogram
	workers int
	ledger  *ledger.Batcher
}

// New builds the service on a NATS connection (request-reply is core NATS).
func New(ctx context.Context, nc *nats.Conn, deps bus.Deps, reg prometheus.Registerer, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	def := DefaultConfig()
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = def.CheckTimeout
	}
	if cfg.Workers == 0 {
		cfg.Workers = def.Workers
	}
	store, err := policystore.Open(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	store.SetDefault(cfg.DefaultPolicy)
	sessions, err := pguard.OpenSessions(ctx, deps.JS)
	if err != nil {
		return nil, err
	}
	s := &Service{nc: nc, deps: deps, store: store, local: &pguard.Local{Policies: store, Sessions: sessions, Timeout: cfg.CheckTimeout}, workers: cfg.Workers,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "troy_guard_checks_total",
			Help: "Guard checks by decision (allow, block, error; refused: the answer was to go somewhere that is not an inbox)."}, []string{"decision"}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "troy_guard_check_seconds",
			Help: "Time to answer one guard check.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
	}
	collectors := []prometheus.Collector{s.checks, s.took}
	if cfg.Ledger != "" {
		if s.ledger, err = ledger.OpenBatcher(ctx, deps.JS, cfg.Ledger, "guard", ledger.BatcherOptions{}); err != nil {
			return nil, fmt.Errorf("guard: decision ledger: %w", err)
		}
		s.local.Recorder = pguard.LedgerRecorder{L: s.ledger}
		collectors = append(collectors,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troy_guard_ledger_records_total",
				Help: "Guard decisions stored in the decision ledger."}, func() float64 { return float64(s.ledger.Appended.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troy_guard_ledger_failures_total",
				Help: "Batches of guard decisions the ledger refused (retried; a full queue blocks checks)."}, func() float64 { return float64(s.ledger.Failures.Load()) }))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return s, nil
}

// Guard returns the in-process guard this service answers with (for the
// HTTP endpoint in the same process).
func (s *Service) Guard() pguard.Guard { return s.local }

// Run answers checks until ctx is cancelled, then drains its subscription.
func (s *Service) Run(ctx context.Context) error {
	if err := s.store.Watch(ctx); err != nil {
		return err
	}
	// nats.go runs a subscription's callbacks one at a time: checks run in
	// their own goroutines, at most workers at once (a full pool holds the
	// callback, and so the next request).
	slots := make(chan struct{}, s.workers)
	var running sync.WaitGroup
	sub, err := s.nc.QueueSubscribe(pguard.Subject, Queue, func(m *nats.Msg) {
		slots <- struct{}{}
		running.Go(func() {
			defer func() { <-slots }()
			s.handle(ctx, m)
		})
	})
	if err != nil {
		return fmt.Errorf("guard: subscribe %s: %w", pguard.Subject, err)
	}
	if s.ledger != nil {
		s.deps.Log.Info().Str("ledger", s.ledger.Ledger()).Msg("guard: decisions are recorded in the ledger")
	}
	<-ctx.Done()
	err = sub.Drain()
	running.Wait()
	return errors.Join(err, s.ledger.Shutdown(ctx))
}

// Ledger is the id of the ledger decisions are recorded in ("" when off).
func (s *Service) Ledger() string { return s.ledger.Ledger() }

func (s *Service) handle(ctx context.Context, m *nats.Msg) {
	if !bus.IsInbox(m.Reply) {
		s.checks.WithLabelValues("refused").Inc()
		s.deps.Log.Warn().Str("reply", m.Reply).Msg("guard: a check asked for its answer somewhere that is not an inbox; not answered, not checked")
		return
	}
	start := time.Now()
	defer func() { s.took.Observe(time.Since(start).Seconds()) }()
	var req pguard.Request
	var reply any
	if err := json.Unmarshal(m.Data, &req); err != nil {
		reply = map[string]string{"error": "request is not a guard request (JSON with action, policy, session_id…): " + err.Error()}
	} else if d, err := s.local.Check(context.WithoutCancel(ctx), req); err != nil && refused(err) {
		reply = map[string]string{"error": err.Error()}
	} else {
		// a decision, also when the guard failed closed (block, with the
		// reason): the client must not take it for an unreachable guard
		reply = d
		s.checks.WithLabelValues(d.Decision).Inc()
	}
	if _, isErr := reply.(map[string]string); isErr {
		s.checks.WithLabelValues("error").Inc()
	}
	body, _ := json.Marshal(reply)
	if err := m.Respond(body); err != nil {
		s.deps.Log.Warn().Err(err).Msg("guard: reply failed")
	}
}

// refused reports whether a check failed because of the request itself (it
// is malformed, or names a policy that is not there), which the client is
// told as an error rather than a decision.
func refused(err error) bool {
	return errors.Is(err, pguard.ErrBadRequest) || errors.Is(err, policystore.ErrNotFound) || errors.Is(err, policy.ErrInvalid)
}
