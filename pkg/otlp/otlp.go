// Package otlp turns OpenTelemetry traces of agents into troy traces: spans
// following the GenAI semantic conventions (gen_ai.*) or OpenInference
// (openinference.span.kind, input.value…) become steps; other spans are
// left out, but their children still find their nearest agent ancestor.
package otlp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/troy-audit/troy/pkg/trace"
)

// LooksLikeJSON reports whether a document is OTLP/JSON (resourceSpans).
func LooksLikeJSON(data []byte) bool {
	head := data[:min(len(data), 512)]
	return bytes.Contains(head, []byte(`"resourceSpans"`)) || bytes.Contains(head, []byte(`"resource_spans"`))
}

// Decode reads an OTLP trace export: protobuf (application/x-protobuf) or
// JSON.
func Decode(data []byte, contentType string) (ptrace.Traces, error) {
	req := ptraceotlp.NewExportRequest()
	var err error
	if strings.Contains(contentType, "protobuf") {
		err = req.UnmarshalProto(data)
	} else {
		err = req.UnmarshalJSON(data)
	}
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("not an OTLP trace export: %w", err)
	}
	return req.Traces(), nil
}

// Converted is one OpenTelemetry trace as a troy trace, and whether its
// root span (the agent run itself) was among the spans.
type Converted struct {
	Trace    *trace.Trace
	Complete bool
}

type span struct {
	s       ptrace.Span
	service string
}

// Convert groups spans by trace id and maps the agent spans of each to
// steps, ordered by start time. Traces without any agent span are not agent
// runs and give nothing. Spans without a trace or span id, and repeats of a
// span id within a trace, are invalid OTLP: they are counted in rejected,
// for the sender to be told.
func Convert(td ptrace.Traces) (out []Converted, rejected int) {
	byTrace := map[string][]span{}
	var order []string
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				if s.TraceID().IsEmpty() || s.SpanID().IsEmpty() {
					rejected++
					continue
				}
				id := s.TraceID().String()
				if _, ok := byTrace[id]; !ok {
					order = append(order, id)
				}
				byTrace[id] = append(byTrace[id], span{s: s, service: service})
			}
		}
	}
	for _, id := range order {
		seen := map[pcommon.SpanID]bool{}
		unique := byTrace[id][:0]
		for _, sp := range byTrace[id] {
			if seen[sp.s.SpanID()] {
				rejected++
				continue
			}
			seen[sp.s.SpanID()] = true
			unique = append(unique, sp)
		}
		if c, ok := convertTrace(id, unique); ok {
			out = append(out, c)
		}
	}
	return out, rejected
}

func convertTrace(id string, spans []span) (Converted, bool) {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].s.StartTimestamp() < spans[j].s.StartTimestamp() })
	parent := map[string]string{}
	kept := map[string]bool{}
	t := &trace.Trace{TraceID: id, Metadata: map[string]any{}}
	complete := false
	for _, sp := range spans {
		sid := sp.s.SpanID().String()
		if !sp.s.ParentSpanID().IsEmpty() {
			parent[sid] = sp.s.ParentSpanID().String()
		} else {
			complete = true
		}
		step, ok := toStep(sp.s)
		if !ok {
			continue
		}
		kept[sid] = true
		t.Steps = append(t.Steps, step)
		attrs := sp.s.Attributes()
		if v, ok := attrs.Get("gen_ai.agent.name"); ok && t.AgentName == "" {
			t.AgentName = v.AsString()
		}
		if v, ok := attrs.Get("gen_ai.conversation.id"); ok {
			t.Metadata["conversation_id"] = v.AsString()
		}
		if t.AgentName == "" && sp.service != "" {
			t.Metadata["service"] = sp.service
		}
	}
	if len(t.Steps) == 0 {
		return Converted{}, false
	}
	for _, st := range t.Steps { // nearest kept ancestor
		p := parent[st.StepID]
		// a parent chain that loops through spans troy skips ends the
		// walk after as many hops as there are spans: no kept ancestor
		for hops := 0; p != "" && !kept[p]; hops++ {
			if hops > len(spans) {
				p = ""
				break
			}
			p = parent[p]
		}
		st.ParentStepID = p
	}
	if t.AgentName == "" {
		t.AgentName, _ = t.Metadata["service"].(string)
	}
	if t.AgentName == "" {
		t.AgentName = "agent"
	}
	return Converted{Trace: t, Complete: complete}, true
}

// toStep maps one span; ok is false for spans that are not agent activity.
func toStep(s ptrace.Span) (*trace.Step, bool) {
	a := s.Attributes()
	str := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := a.Get(k); ok && v.AsString() != "" {
				return v.AsString()
			}
		}
		return ""
	}
	op := str("gen_ai.operation.name")
	kind := strings.ToUpper(str("openinference.span.kind"))
	var typ string
	switch {
	case op == "execute_tool" || kind == "TOOL" || kind == "RETRIEVER":
		typ = trace.TypeToolCall
	case op == "chat" || op == "text_completion" || op == "generate_content" || op == "embeddings" || kind == "LLM" || kind == "EMBEDDING":
		typ = trace.TypeLLMCall
	case op == "invoke_agent" || op == "create_agent" || kind == "AGENT" || kind == "CHAIN":
		typ = trace.TypeDecision
	case str("gen_ai.tool.name") != "":
		typ = trace.TypeToolCall
	case str("gen_ai.system", "gen_ai.provider.name", "gen_ai.request.model") != "":
		typ = trace.TypeLLMCall
	default:
		return nil, false
	}
	step := &trace.Step{
		StepID:      s.SpanID().String(),
		Type:        typ,
		Name:        str("gen_ai.tool.name", "tool.name", "gen_ai.agent.name", "gen_ai.request.model", "llm.model_name"),
		Description: s.Name(),
		Input:       value(a, "gen_ai.tool.call.arguments", "input.value", "gen_ai.input.messages", "gen_ai.prompt"),
		Output:      value(a, "gen_ai.tool.call.result", "output.value", "gen_ai.output.messages", "gen_ai.completion"),
		Timestamp:   s.StartTimestamp().AsTime().UTC().Format(time.RFC3339Nano),
		Metadata:    map[string]any{},
	}
	if step.Name == "" {
		step.Name = s.Name()
	}
	if step.Input == nil {
		step.Input = messagesOf(a, "llm.input_messages.")
	}
	if step.Output == nil {
		step.Output = messagesOf(a, "llm.output_messages.")
	}
	a.Range(func(k string, v pcommon.Value) bool {
		step.Metadata[k] = v.AsRaw()
		return true
	})
	if s.Status().Code() == ptrace.StatusCodeError {
		step.Metadata["status"] = "error"
		step.Metadata["status_message"] = s.Status().Message()
	}
	return step, true
}

// value is the first attribute present, JSON strings parsed.
func value(a pcommon.Map, keys ...string) any {
	for _, k := range keys {
		v, ok := a.Get(k)
		if !ok {
			continue
		}
		raw := v.AsRaw()
		if s, isStr := raw.(string); isStr {
			var parsed any
			if t := strings.TrimSpace(s); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Unmarshal([]byte(t), &parsed) == nil {
				return parsed
			}
		}
		return raw
	}
	return nil
}

// messagesOf collects OpenInference's flattened message attributes
// (llm.input_messages.0.message.content…) into a list of maps.
func messagesOf(a pcommon.Map, prefix string) any {
	msgs := map[string]map[string]any{}
	a.Range(func(k string, v pcommon.Value) bool {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			return true
		}
		idx, field, ok := strings.Cut(rest, ".")
		if !ok {
			return true
		}
		if msgs[idx] == nil {
			msgs[idx] = map[string]any{}
		}
		msgs[idx][strings.TrimPrefix(field, "message.")] = v.AsRaw()
		return true
	})
	if len(msgs) == 0 {
		return nil
	}
	keys := make([]string, 0, len(msgs))
	for k := range msgs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = msgs[k]
	}
	return out
}

// Parse reads an OTLP/JSON file holding one agent run.
func Parse(data []byte, lim trace.Limits) (*trace.Trace, error) {
	if lim.MaxBytes > 0 && len(data) > lim.MaxBytes {
		return trace.Parse(data, lim) // reports the size
	}
	td, err := Decode(data, "application/json")
	if err != nil {
		return nil, &trace.InvalidError{Problems: []trace.Problem{{Message: err.Error()}}}
	}
	cs, rejected := Convert(td)
	switch {
	case rejected > 0:
		return nil, &trace.InvalidError{Problems: []trace.Problem{{Message: fmt.Sprintf("%d span(s) have no traceId or spanId, or repeat a spanId: every span needs its trace's 16-byte id and its own 8-byte id", rejected)}}}
	case len(cs) == 0:
		return nil, &trace.InvalidError{Problems: []trace.Problem{{Message: "no agent spans: expected gen_ai.* (OpenTelemetry GenAI) or openinference.span.kind attributes"}}}
	case len(cs) > 1:
		return nil, &trace.InvalidError{Problems: []trace.Problem{{Message: fmt.Sprintf(
			"holds %d traces: a file must hold one agent run (or send it to POST /v1/traces, which streams each)", len(cs))}}}
	}
	t := cs[0].Trace
	if lim.MaxSteps > 0 && len(t.Steps) > lim.MaxSteps {
		return nil, &trace.InvalidError{TraceID: t.TraceID, Problems: []trace.Problem{{Message: fmt.Sprintf("%d steps, over the %d-step limit", len(t.Steps), lim.MaxSteps)}}}
	}
	// The converted trace is checked like any other (parent cycles among
	// agent spans, timestamps, ids): a stage never trusts a converter.
	canonical, err := json.Marshal(t)
	if err != nil {
		return nil, &trace.InvalidError{TraceID: t.TraceID, Problems: []trace.Problem{{Message: "convert: " + err.Error()}}}
	}
	return trace.Parse(canonical, trace.Limits{MaxSteps: lim.MaxSteps})
}
