// Package syslog is the forwarder that sends every finding as a CEF message
// in an RFC 5424 syslog frame, over TCP (octet-counted, RFC 6587) or UDP.
package syslog

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/siem"
)

// Consumer is the durable consumer this forwarder reads (troy.violations.>).
const Consumer = pipelines.ConsumerSyslog

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageViolations)}

// Produces lists the stages this service publishes to: none, it forwards.
var Produces []string

// Config says where to send.
type Config struct {
	Addr      string // host:port of the collector
	Network   string // tcp or udp
	AppName   string
	Timeout   time.Duration
	BatchSize int
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config {
	return Config{Network: "tcp", AppName: "troy", Timeout: 5 * time.Second, BatchSize: 100}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("syslog: --syslog-addr %q: %w (want host:port)", c.Addr, err)
	}
	if c.Network != "tcp" && c.Network != "udp" {
		return fmt.Errorf("syslog: --syslog-network %q: want tcp or udp", c.Network)
	}
	return nil
}

// Service is the syslog forwarder.
type Service struct {
	deps bus.Deps
	cfg  Config
	host string
	conn net.Conn
}

// New builds the forwarder.
func New(deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Service{deps: deps, cfg: cfg, host: host}, nil
}

// Run forwards until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	c, _ := s.deps.Topology.Consumer(Consumer)
	cons, err := s.deps.JS.Consumer(ctx, c.Stream, Consumer)
	if err != nil {
		return fmt.Errorf("syslog: consumer: %w (was the topology provisioned?)", err)
	}
	defer func() {
		if s.conn != nil {
			s.conn.Close()
		}
	}()
	log := s.deps.Log.With().Str("forwarder", Consumer).Logger()
	return bus.ConsumeBatches(ctx, cons, bus.BatchConfig{Size: s.cfg.BatchSize, Wait: time.Second, Log: log}, s.send)
}

func (s *Service) send(ctx context.Context, msgs []jetstream.Msg) error {
	for _, m := range msgs {
		var f ocsf.Finding
		if err := json.Unmarshal(m.Data(), &f); err != nil {
			s.deps.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("syslog: skipping a malformed finding")
			continue
		}
		if err := s.write(ctx, siem.Syslog(f, s.host, s.cfg.AppName)); err != nil {
			return err
		}
	}
	return nil
}

// write sends one frame, dialling (again) when needed. A failed connection
// is dropped so the retry dials afresh; a batch resent after a failure may
// repeat frames already written, which a SIEM deduplicates by externalId.
func (s *Service) write(ctx context.Context, msg string) error {
	if s.conn == nil {
		d := net.Dialer{Timeout: s.cfg.Timeout}
		conn, err := d.DialContext(ctx, s.cfg.Network, s.cfg.Addr)
		if err != nil {
			return fmt.Errorf("syslog: dial %s %s: %w", s.cfg.Network, s.cfg.Addr, err)
		}
		s.conn = conn
	}
	frame := msg
	if s.cfg.Network == "tcp" {
		frame = fmt.Sprintf("%d %s", len(msg), msg) // RFC 6587 octet counting
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	if _, err := s.conn.Write([]byte(frame)); err != nil {
		s.conn.Close()
		s.conn = nil
		return fmt.Errorf("syslog: write: %w", err)
	}
	return nil
}
