package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/otlp"
)

// isOTLP tells an OTLP/HTTP export from a troy document on POST /v1/traces.
func isOTLP(r *http.Request, body []byte) bool {
	return r.Header.Get("Content-Type") == "application/x-protobuf" || otlp.LooksLikeJSON(body)
}

// receiveOTLP streams each agent run in an export: its steps go to
// its partition's troy.ingest.step.<p>.<trace_id>, and a run whose root span came (the agent
// span ends, and is exported, last) is ended. Other runs end when idle.
func receiveOTLP(w http.ResponseWriter, r *http.Request, pub Publisher, body []byte, policyHash string, partitions int) {
	protobuf := r.Header.Get("Content-Type") == "application/x-protobuf"
	td, err := otlp.Decode(body, r.Header.Get("Content-Type"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	runs, rejected := otlp.Convert(td)
	for _, c := range runs {
		if err := publishRun(r.Context(), pub, c, policyHash, partitions); err != nil {
			http.Error(w, "the pipeline did not take the spans; retry: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	// Spans that could not be taken are reported as OTLP partial success,
	// which exporters log: never dropped without a word.
	resp := ptraceotlp.NewExportResponse()
	if rejected > 0 {
		resp.PartialSuccess().SetRejectedSpans(int64(rejected))
		resp.PartialSuccess().SetErrorMessage(fmt.Sprintf("%d span(s) have no traceId or spanId, or repeat a spanId", rejected))
	}
	var out []byte
	if protobuf {
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, err = resp.MarshalProto()
	} else {
		w.Header().Set("Content-Type", "application/json")
		out, err = resp.MarshalJSON()
	}
	if err != nil {
		http.Error(w, "encode the OTLP response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func publishRun(ctx context.Context, pub Publisher, c otlp.Converted, policyHash string, partitions int) error {
	t := c.Trace
	if !bus.ValidTraceToken(t.TraceID) {
		return fmt.Errorf("trace id %q cannot name a subject", t.TraceID)
	}
	body, err := json.Marshal(t.Steps)
	if err != nil {
		return err
	}
	m := nats.NewMsg(bus.StreamSubject(bus.StreamStep, t.TraceID, partitions))
	m.Data = body
	m.Header.Set(bus.HeaderAgent, t.AgentName)
	m.Header.Set(bus.HeaderPolicy, policyHash)
	if _, err := pub.PublishMsg(ctx, m); err != nil {
		return err
	}
	if c.Complete {
		_, err = pub.PublishMsg(ctx, nats.NewMsg(bus.StreamSubject(bus.StreamEnd, t.TraceID, partitions)))
	}
	return err
}
