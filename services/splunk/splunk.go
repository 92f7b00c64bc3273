// Package splunk is the forwarder that sends every finding to a Splunk HTTP
// Event Collector, in batches, and drops nothing while Splunk is down.
package splunk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/siem"
)

// Consumer is the durable consumer this forwarder reads (troy.violations.>).
const Consumer = pipelines.ConsumerSplunk

// Consumes lists the subjects this service reads (its consumer's filters).
var Consumes = []string{bus.Wildcard(bus.StageViolations)}

// Produces lists the stages this service publishes to: none, it forwards.
var Produces []string

// Config says where and how to send.
type Config struct {
	URL        string // e.g. https://splunk.example:8088 (or the full …/services/collector/event)
	Token      string // HEC token
	Index      string // optional
	BatchSize  int
	FlushEvery time.Duration
	Timeout    time.Duration
}

// DefaultConfig is used where a field is left zero.
func DefaultConfig() Config {
	return Config{BatchSize: 100, FlushEvery: time.Second, Timeout: 10 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("splunk: --splunk-url %q must be an http(s) URL of the HTTP Event Collector", c.URL)
	}
	if c.Token == "" {
		return errors.New("splunk: a HEC token is required (--splunk-token or TROY_SPLUNK_TOKEN)")
	}
	if c.BatchSize < 1 || c.FlushEvery <= 0 || c.Timeout <= 0 {
		return errors.New("splunk: batch size, flush interval and timeout must be positive")
	}
	return nil
}

// Service is the Splunk forwarder.
type Service struct {
	deps   bus.Deps
	cfg    Config
	client *http.Client
	url    string
}

// New builds the forwarder.
func New(deps bus.Deps, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	url := strings.TrimRight(cfg.URL, "/")
	if !strings.HasSuffix(url, "/services/collector/event") {
		url += "/services/collector/event"
	}
	return &Service{deps: deps, cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}, url: url}, nil
}

// Run forwards until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	c, _ := s.deps.Topology.Consumer(Consumer)
	cons, err := s.deps.JS.Consumer(ctx, c.Stream, Consumer)
	if err != nil {
		return fmt.Errorf("splunk: consumer: %w (was the topology provisioned?)", err)
	}
	log := s.deps.Log.With().Str("forwarder", Consumer).Logger()
	return bus.ConsumeBatches(ctx, cons, bus.BatchConfig{Size: s.cfg.BatchSize, Wait: s.cfg.FlushEvery, Log: log}, s.send)
}

func (s *Service) send(ctx context.Context, msgs []jetstream.Msg) error {
	events := make([]siem.HECEvent, 0, len(msgs))
	for _, m := range msgs {
		var f ocsf.Finding
		if err := json.Unmarshal(m.Data(), &f); err != nil {
			s.deps.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("splunk: skipping a malformed finding")
			continue
		}
		events = append(events, siem.HEC(f, s.cfg.Index))
	}
	if len(events) == 0 {
		return nil
	}
	body, err := siem.HECBatch(events)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Splunk "+s.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("splunk: %w", err)
	}
	defer resp.Body.Close()
	detail, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("splunk: %s: %s", resp.Status, strings.TrimSpace(string(detail)))
	}
	return nil
}
