// Package eventsink sends a run's events outside troy as they happen: a
// JSON-lines file, an HTTP endpoint (one JSON event per POST), or an
// OpenTelemetry collector (OTLP/HTTP logs). A sink never slows or breaks a
// run: HTTP sinks queue (bounded) and post from their own goroutine, and
// every failure is counted and reported when the sink is closed.
package eventsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/troy-audit/troy/pkg/agent"
)

// Sink is an agent.Sink that must be closed when the run ends.
type Sink interface {
	agent.Sink
	// Close flushes what is queued (bounded by ctx) and returns the
	// failures seen.
	Close(ctx context.Context) []string
}

// Filter keeps only some event types (nil keeps all).
type Filter map[string]bool

// NewFilter builds a filter from a list of types.
func NewFilter(types []string) Filter {
	if len(types) == 0 {
		return nil
	}
	f := Filter{}
	for _, t := range types {
		f[t] = true
	}
	return f
}

func (f Filter) keep(typ string) bool { return f == nil || f[typ] }

// problems collects failures, keeping the first few and a count.
type problems struct {
	mu    sync.Mutex
	list  []string
	extra int
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) < 10 {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	} else {
		p.extra++
	}
}

func (p *problems) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]string(nil), p.list...)
	if p.extra > 0 {
		out = append(out, fmt.Sprintf("… and %d more", p.extra))
	}
	return out
}

// JSONL appends one event per line to a file (0600), each line written
// whole as it happens.
type JSONL struct {
	mu     sync.Mutex
	f      *os.File
	filter Filter
	probs  problems
}

// OpenJSONL opens (appends to) path.
func OpenJSONL(path string, types []string) (*JSONL, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("events file: %w", err)
	}
	return &JSONL{f: f, filter: NewFilter(types)}, nil
}

// Emit implements agent.Sink.
func (j *JSONL) Emit(ev agent.Event) {
	if !j.filter.keep(ev.Type) {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		j.probs.add("events file: %s: %v", ev.Type, err)
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		j.probs.add("events file: %v", err)
	}
}

// Close implements Sink.
func (j *JSONL) Close(context.Context) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.f.Close(); err != nil {
		j.probs.add("events file: %v", err)
	}
	return j.probs.all()
}

// Poster posts events from its own goroutine through a bounded queue.
type Poster struct {
	name   string
	url    string
	header http.Header
	client *http.Client
	filter Filter
	encode func([]agent.Event) ([]byte, error)
	queue  chan agent.Event
	done   chan struct{}
	probs  problems
	closed bool
	mu     sync.Mutex
}

// QueueSize bounds the events waiting to be posted; beyond it they are
// dropped and counted.
const QueueSize = 1024

// HTTP posts each event as JSON to url.
func HTTP(url string, header http.Header, types []string) *Poster {
	return start("http sink "+url, url, header, types, func(evs []agent.Event) ([]byte, error) { return json.Marshal(evs[0]) })
}

// OTLP posts events as OpenTelemetry log records to endpoint/v1/logs, the
// event JSON as the body, with troy.run_id, troy.session_id,
// troy.event_type, troy.iteration and troy.phase attributes.
func OTLP(endpoint string, header http.Header, types []string) *Poster {
	url := strings.TrimRight(endpoint, "/") + "/v1/logs"
	return start("otlp sink "+url, url, header, types, otlpLogs)
}

func start(name, url string, header http.Header, types []string, encode func([]agent.Event) ([]byte, error)) *Poster {
	p := &Poster{name: name, url: url, header: header, client: &http.Client{Timeout: 5 * time.Second}, filter: NewFilter(types),
		encode: encode, queue: make(chan agent.Event, QueueSize), done: make(chan struct{})}
	go p.loop()
	return p
}

// Emit implements agent.Sink: it never blocks.
func (p *Poster) Emit(ev agent.Event) {
	if !p.filter.keep(ev.Type) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- ev:
	default:
		p.probs.add("%s: queue full (%d), dropped %s", p.name, QueueSize, ev.Type)
	}
}

func (p *Poster) loop() {
	defer close(p.done)
	for ev := range p.queue {
		body, err := p.encode([]agent.Event{ev})
		if err != nil {
			p.probs.add("%s: %s: %v", p.name, ev.Type, err)
			continue
		}
		req, err := http.NewRequest(http.MethodPost, p.url, bytes.NewReader(body))
		if err != nil {
			p.probs.add("%s: %v", p.name, err)
			continue
		}
		for k, vs := range p.header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.client.Do(req)
		if err != nil {
			p.probs.add("%s: %s: %v", p.name, ev.Type, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			p.probs.add("%s: %s: HTTP %d", p.name, ev.Type, resp.StatusCode)
		}
	}
}

// Close implements Sink: it posts what is queued, until ctx ends.
func (p *Poster) Close(ctx context.Context) []string {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.queue)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.probs.add("%s: %d event(s) not posted before the run's end: %v", p.name, len(p.queue), ctx.Err())
	}
	return p.probs.all()
}

func otlpLogs(evs []agent.Event) ([]byte, error) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "troy")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("troy.agent")
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(ev.TS))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(time.Now()))
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr(string(b))
		a := lr.Attributes()
		a.PutStr("troy.run_id", ev.RunID)
		a.PutStr("troy.session_id", ev.SessionID)
		a.PutStr("troy.event_type", ev.Type)
		a.PutInt("troy.iteration", int64(ev.Iteration))
		a.PutStr("troy.phase", ev.Phase)
	}
	return plogotlp.NewExportRequestFromLogs(ld).MarshalJSON()
}
