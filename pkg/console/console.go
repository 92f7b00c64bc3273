// Package console is troy serve's web console: live findings as they are
// published (server-sent events), the recent reports with their risk, each
// trace's HTML report, and the running agents with their pending approvals.
// Its page and script are embedded; nothing is loaded from elsewhere.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/report"
)

//go:embed static
var static embed.FS

// Bounds: what is kept for a page that opens, how many pages may follow
// the live feed at once, and how far one may fall behind.
const (
	keepRecent  = 200
	maxClients  = 64
	clientQueue = 256
	backlog     = time.Hour // findings shown when the console starts
)

// Violation is one finding as the console shows it.
type Violation struct {
	Time     time.Time `json:"time"`
	Severity string    `json:"severity"`
	RuleID   string    `json:"rule_id"`
	TraceID  string    `json:"trace_id"`
	StepID   string    `json:"step_id"`
	Agent    string    `json:"agent"`
	Message  string    `json:"message"`
}

// Report is one finished audit as the console lists it; Seq finds its
// message on the outcomes stream for the trace view.
type Report struct {
	Seq        uint64         `json:"seq"`
	Time       time.Time      `json:"time"`
	TraceID    string         `json:"trace_id"`
	Steps      int            `json:"steps"`
	RiskScore  int            `json:"risk_score"`
	Severities map[string]int `json:"severity_counts"`
}

// Config is what the console reads.
type Config struct {
	JS        jetstream.JetStream
	Approvals *agentrun.Approvals // nil: no approvals shown
	Sessions  *agentrun.Sessions  // nil: no agents shown
	Log       zerolog.Logger
}

// Console serves the console and follows the streams it shows.
type Console struct {
	cfg     Config
	ctx     context.Context
	started sync.Once
	outcome jetstream.Stream // set by start

	mu         sync.Mutex
	violations []Violation // newest last
	reports    []Report
	clients    map[chan sseEvent]struct{}
	closed     bool
	problem    error // why the live feed is not running, for the page
}

type sseEvent struct {
	kind string
	data []byte
}

// New makes the console of a troy serve. It follows the findings and the
// reports (until ctx ends) from the first time a page asks, not at start:
// a service whose console nobody opens reads nothing for it. A stream it
// may not read (a NATS user without the grant) is reported on the page,
// not fatal.
func New(ctx context.Context, cfg Config) *Console {
	c := &Console{cfg: cfg, ctx: ctx, clients: map[chan sseEvent]struct{}{}}
	context.AfterFunc(ctx, c.Close) // pages following the feed let the server stop
	return c
}

// start begins following, once.
func (c *Console) start() {
	c.started.Do(func() {
		ctx := c.ctx
		since := time.Now().Add(-backlog)
		if err := c.follow(ctx, pipelines.StreamViolations, []string{"troy.violations.>"}, since, false, c.onViolation); err != nil {
			c.fail(err)
		}
		outcome, err := c.cfg.JS.Stream(ctx, pipelines.StreamOutcomes)
		if err != nil {
			c.fail(fmt.Errorf("reports: %w", err))
			return
		}
		c.outcome = outcome
		if err := c.follow(ctx, pipelines.StreamOutcomes, []string{"troy.report.>"}, since.Add(-23*time.Hour), true, c.onReport); err != nil {
			c.fail(err)
		}
	})
}

func (c *Console) fail(err error) {
	c.cfg.Log.Warn().Err(err).Msg("console: live feed unavailable")
	c.mu.Lock()
	c.problem = errors.Join(c.problem, err)
	c.mu.Unlock()
}

func (c *Console) follow(ctx context.Context, stream string, subjects []string, since time.Time, headersOnly bool, fn func(jetstream.Msg)) error {
	cons, err := c.cfg.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: subjects,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since, HeadersOnly: headersOnly})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	cc, err := cons.Consume(fn)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	context.AfterFunc(ctx, cc.Stop)
	return nil
}

func (c *Console) onViolation(m jetstream.Msg) {
	var f ocsf.Finding
	if err := json.Unmarshal(m.Data(), &f); err != nil {
		c.cfg.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("console: a finding it cannot read")
		return
	}
	str := func(k string) string { s, _ := f.Unmapped[k].(string); return s }
	v := Violation{Time: time.UnixMilli(f.Time).UTC(), Severity: strings.ToLower(f.Severity), RuleID: f.FindingInfo.Analytic.UID,
		TraceID: str("trace_id"), StepID: str("step_id"), Agent: str("agent_name"), Message: f.FindingInfo.Desc}
	c.mu.Lock()
	c.violations = keep(append(c.violations, v))
	c.mu.Unlock()
	c.broadcast("violation", v)
}

func (c *Console) onReport(m jetstream.Msg) {
	s, err := events.GetSummary(m.Headers())
	if err != nil {
		c.cfg.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("console: a report without its summary")
		return
	}
	md, err := m.Metadata()
	if err != nil {
		return
	}
	r := Report{Seq: md.Sequence.Stream, Time: md.Timestamp.UTC(), TraceID: s.TraceID, Steps: s.Steps, RiskScore: s.RiskScore, Severities: s.SeverityCounts}
	c.mu.Lock()
	c.reports = keep(append(c.reports, r))
	c.mu.Unlock()
	c.broadcast("report", r)
}

func keep[T any](s []T) []T {
	if len(s) > keepRecent {
		return append(s[:0:0], s[len(s)-keepRecent:]...)
	}
	return s
}

// broadcast sends an event to every page following the feed; a page too
// far behind is told so and dropped (it reloads), never blocks the rest.
func (c *Console) broadcast(kind string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.clients {
		select {
		case ch <- sseEvent{kind, b}:
		default:
			delete(c.clients, ch)
			close(ch)
		}
	}
}

// Close ends every live feed and refuses new ones, so an HTTP server's
// shutdown does not wait on open consoles (http.Server.RegisterOnShutdown).
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for ch := range c.clients {
		delete(c.clients, ch)
		close(ch)
	}
}

// Handlers are the console's routes; guard wraps each with the scope it
// needs (the API's tokens).
func (c *Console) Handlers(guard func(scope string, h http.Handler) http.Handler, read string) map[string]http.Handler {
	return map[string]http.Handler{
		"GET /{$}":                  assets(),
		"GET /console/app.js":       assets(),
		"GET /console/app.css":      assets(),
		"GET /console/events":       guard(read, c.following(c.events)),
		"GET /console/state":        guard(read, c.following(c.state)),
		"GET /console/traces/{seq}": guard(read, c.following(c.trace)),
		"GET /console/agents":       guard(read, http.HandlerFunc(c.agents)),
	}
}

// following runs h once the console follows its streams.
func (c *Console) following(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.start()
		h(w, r)
	})
}

// events streams findings and reports as server-sent events.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan sseEvent, clientQueue)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		http.Error(w, "the server is stopping", http.StatusServiceUnavailable)
		return
	}
	if len(c.clients) >= maxClients {
		c.mu.Unlock()
		http.Error(w, fmt.Sprintf("%d consoles already follow the live feed", maxClients), http.StatusServiceUnavailable)
		return
	}
	c.clients[ch] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if _, ok := c.clients[ch]; ok {
			delete(c.clients, ch)
			close(ch)
		}
		c.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, "event: hello\ndata: {}\n\n")
	fl.Flush()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			fl.Flush()
		case ev, open := <-ch:
			if !open { // too far behind, or the server is stopping: the page reconnects
				fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
				fl.Flush()
				return
			}
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.kind, ev.data)
			fl.Flush()
		}
	}
}

// state is what a page shows when it opens.
func (c *Console) state(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	body := map[string]any{"violations": append([]Violation{}, c.violations...), "reports": append([]Report{}, c.reports...)}
	if c.problem != nil {
		body["problem"] = c.problem.Error()
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, body)
}

// trace renders a report's HTML page from its message on the outcomes
// stream.
func (c *Console) trace(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || c.outcome == nil {
		http.Error(w, "no such report", http.StatusNotFound)
		return
	}
	m, err := c.outcome.GetMsg(r.Context(), seq)
	if err != nil {
		http.Error(w, "report "+strconv.FormatUint(seq, 10)+" is not on the stream (it expires with the stream's max age)", http.StatusNotFound)
		return
	}
	rep, err := events.Decode[events.Reported](m.Data)
	if err != nil {
		http.Error(w, "that message is not a report", http.StatusNotFound)
		return
	}
	page, err := report.HTML(rep.Audit)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	_, _ = w.Write(page)
}

// agents lists the agent sessions and the approvals waiting.
func (c *Console) agents(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"sessions": []agentrun.Summary{}, "approvals": []agentrun.Approval{}}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var problems []string
	if c.cfg.Sessions != nil {
		if s, err := c.cfg.Sessions.List(ctx); err != nil {
			problems = append(problems, err.Error())
		} else {
			body["sessions"] = s
		}
	}
	if c.cfg.Approvals != nil {
		if a, err := c.cfg.Approvals.List(ctx, false); err != nil {
			problems = append(problems, err.Error())
		} else {
			body["approvals"] = a
		}
	}
	if len(problems) > 0 {
		body["problems"] = problems
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// assets serves the embedded page, script and style.
func assets() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
		files.ServeHTTP(w, r)
	})
}
