// Package httpapi is troy's HTTP front door: endpoints that turn requests
// into pipeline messages.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/trace"
)

// Publisher is the part of JetStream the handler needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// TracesConfig configures POST /v1/traces.
type TracesConfig struct {
	Limits trace.Limits
	// Policy (an id, or a sha256: hash) is put on traces whose request names
	// none (?policy=).
	Policy string
	// Policies resolves ?policy= (and Policy) before anything is accepted:
	// an unknown policy is a 422 now, not a dead letter later. Nil skips
	// the check (the pipeline then resolves it).
	Policies PolicyLookup
	// Partitions of streamed traces (OTLP exports are streamed).
	Partitions int
	Log        zerolog.Logger
}

// Accepted is the 202 response.
type Accepted struct {
	TraceID string `json:"trace_id"`
	Run     string `json:"run"`
	Key     string `json:"key"`
	Policy  string `json:"policy"` // the id or hash it will be evaluated with
}

// Problem is the error response: what is wrong and, for traces, every problem.
type Problem struct {
	Error    string          `json:"error"`
	Problems []trace.Problem `json:"problems,omitempty"`
}

// Traces handles POST /v1/traces[?run=R&policy=HASH]: one trace document in
// the body, checked at once (400 with every problem) and published to
// troy.ingest.<run> (default run "live"). Reports appear on troy.report.<run>.
// An OTLP/HTTP export (protobuf or JSON) on the same path is streamed: each
// agent run's spans become its steps.
func Traces(pub Publisher, cfg TracesConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run := r.URL.Query().Get("run")
		if run == "" {
			run = bus.LiveRun
		}
		if !bus.ValidRun(run) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: fmt.Sprintf("run %q: use 1-64 letters, digits, '-' or '_'", run)})
			return
		}
		policyRef, ok := resolvePolicy(w, r, cfg.Policies, cfg.Policy)
		if !ok {
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(cfg.Limits.MaxBytes)+1))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeJSON(w, http.StatusRequestEntityTooLarge, Problem{Error: fmt.Sprintf("trace is over the %d-byte limit: split it", cfg.Limits.MaxBytes)})
			return
		case err != nil:
			writeJSON(w, http.StatusBadRequest, Problem{Error: "reading the body: " + err.Error()})
			return
		}
		if isOTLP(r, body) {
			receiveOTLP(w, r, pub, body, policyRef, cfg.Partitions)
			return
		}
		tr, err := trace.ParseAny(body, cfg.Limits, r.URL.Query().Get("format"), "")
		var invalid *trace.InvalidError
		if errors.As(err, &invalid) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: "invalid trace", Problems: invalid.Problems})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, Problem{Error: err.Error()})
			return
		}
		key := bus.Key(run, "", tr.TraceID)
		m := nats.NewMsg(bus.Subject(bus.StageIngest, run))
		m.Data = body
		m.Header.Set(bus.HeaderSource, tr.TraceID) // also what ingest names an id-less chat log
		m.Header.Set(bus.HeaderKey, key)
		m.Header.Set(bus.HeaderPolicy, policyRef)
		m.Header.Set(bus.HeaderMsgID, bus.MsgID(bus.StageIngest, key, policyRef))
		if f := r.URL.Query().Get("format"); f != "" {
			m.Header.Set(bus.HeaderFormat, f)
		}
		if _, err := pub.PublishMsg(r.Context(), m); err != nil {
			cfg.Log.Error().Err(err).Str("trace_id", tr.TraceID).Msg("http ingest: publish failed")
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the trace; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, Accepted{TraceID: tr.TraceID, Run: run, Key: key, Policy: policyRef})
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
