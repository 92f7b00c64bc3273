// Package checkpointer is the service that keeps the decision ledger
// honest: it follows the LEDGER stream, keeps the Merkle tree over every
// entry, and signs a checkpoint of it onto LEDGER_CHECKPOINTS every N
// entries or T seconds (pkg/ledger.Checkpointer).
package checkpointer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ledger"
)

// Config tunes the service.
type Config struct {
	// Key is the Ed25519 signing key (note format), or a file holding it;
	// without one the service signs nothing and says so.
	Key        string
	Every      uint64
	Interval   time.Duration
	Registerer prometheus.Registerer
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config { return Config{Every: 1000, Interval: time.Minute} }

// Service is the checkpointer.
type Service struct {
	deps bus.Deps
	cp   *ledger.Checkpointer // nil without a key
}

// New builds the service; a key that cannot be read is an error.
func New(deps bus.Deps, cfg Config) (*Service, error) {
	s := &Service{deps: deps}
	if cfg.Key == "" {
		return s, nil
	}
	signer, verifier, err := ledger.LoadKeys(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("checkpointer: %w", err)
	}
	size := prometheus.NewGauge(prometheus.GaugeOpts{Name: "troy_ledger_checkpoint_size",
		Help: "Entries covered by the newest checkpoint this process signed."})
	signed := prometheus.NewCounter(prometheus.CounterOpts{Name: "troy_ledger_checkpoints_total",
		Help: "Checkpoints this process signed."})
	var cp *ledger.Checkpointer
	stopped := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troy_ledger_checkpointer_stopped",
		Help: "1 when the checkpointer stopped signing: the ledger has a hole or no longer matches what its key signed (see the log)."},
		func() float64 {
			if cp != nil && cp.Fault() != nil {
				return 1
			}
			return 0
		})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{size, signed, stopped} {
			if err := cfg.Registerer.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	cp = &ledger.Checkpointer{JS: deps.JS, Signer: signer, Verifier: verifier, Every: cfg.Every, Interval: cfg.Interval, Log: deps.Log,
		Signed: func(n uint64) { size.Set(float64(n)); signed.Inc() }}
	s.cp = cp
	return s, nil
}

// Run signs until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.cp == nil {
		s.deps.Log.Warn().Msg("checkpointer: no signing key (TROY_LEDGER_KEY or --ledger-key; troy ledger keygen makes one): the ledger is hash-chained but no checkpoints are signed")
		<-ctx.Done()
		return nil
	}
	return s.cp.Run(ctx)
}
