package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/trace"
)

// Steps handles POST /v1/traces/{trace_id}/steps[?agent=A&policy=P]: one
// step or a list, checked at once (400 with every problem) and published to
// troy.ingest.step.<trace_id> for the streamer (202).
func Steps(pub Publisher, cfg TracesConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("trace_id")
		if !bus.ValidTraceToken(id) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: fmt.Sprintf("trace id %q: no spaces, '*', '>' or empty dot-separated parts", id)})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(cfg.Limits.MaxBytes)+1))
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, Problem{Error: fmt.Sprintf("over the %d-byte limit: send fewer steps at a time", cfg.Limits.MaxBytes)})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, Problem{Error: "reading the body: " + err.Error()})
			return
		}
		steps, err := trace.ParseSteps(body, cfg.Limits)
		var invalid *trace.InvalidError
		if errors.As(err, &invalid) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: "invalid steps", Problems: invalid.Problems})
			return
		}
		m := nats.NewMsg(bus.StepPrefix + id)
		m.Data = body
		if a := r.URL.Query().Get("agent"); a != "" {
			m.Header.Set(bus.HeaderAgent, a)
		}
		if p := r.URL.Query().Get("policy"); p != "" {
			m.Header.Set(bus.HeaderPolicy, p)
		}
		if _, err := pub.PublishMsg(r.Context(), m); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the steps; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"trace_id": id, "steps": len(steps)})
	})
}

// End handles POST /v1/traces/{trace_id}/end: the trace is complete; its
// last verdicts and its report follow.
func End(pub Publisher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("trace_id")
		if !bus.ValidTraceToken(id) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: fmt.Sprintf("trace id %q: no spaces, '*', '>' or empty dot-separated parts", id)})
			return
		}
		if _, err := pub.PublishMsg(r.Context(), nats.NewMsg(bus.EndPrefix+id)); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the end; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"trace_id": id, "ended": true})
	})
}
