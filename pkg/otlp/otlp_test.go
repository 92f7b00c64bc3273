package otlp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/troy-audit/troy/pkg/trace"
)

var (
	tid = pcommon.TraceID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	t0  = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	sid = func(n byte) pcommon.SpanID { return pcommon.SpanID([8]byte{0, 0, 0, 0, 0, 0, 0, n}) }
)

// agentRun builds an export: an agent span, a chat, a tool call, and an
// HTTP span (not agent activity) whose child is an OpenInference tool span.
func agentRun(withRoot bool) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "shop-service")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	add := func(id, parent byte, name string, at int, attrs map[string]any) {
		s := spans.AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(sid(id))
		if parent != 0 {
			s.SetParentSpanID(sid(parent))
		}
		s.SetName(name)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(at) * time.Second)))
		if err := s.Attributes().FromRaw(attrs); err != nil {
			panic(err)
		}
	}
	if withRoot {
		add(1, 0, "invoke_agent shop", 0, map[string]any{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "shop-bot",
			"gen_ai.conversation.id": "conv-9"})
	}
	add(2, 1, "chat gpt-4o", 1, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
		"gen_ai.input.messages": `[{"role": "user", "parts": [{"type": "text", "content": "email my receipt"}]}]`})
	add(3, 1, "execute_tool send_email", 2, map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "send_email",
		"gen_ai.tool.call.arguments": `{"to": "x@evil.example"}`, "gen_ai.tool.call.result": "sent"})
	add(4, 1, "POST /api", 3, map[string]any{"http.method": "POST"})
	add(5, 4, "lookup", 4, map[string]any{"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": `{"q": 1}`,
		"output.value": "found"})
	add(6, 1, "llm", 5, map[string]any{"openinference.span.kind": "LLM", "llm.model_name": "claude",
		"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "hi",
		"llm.input_messages.1.message.role": "assistant", "llm.input_messages.1.message.content": "hello"})
	return td
}

func steps(t *trace.Trace) []string {
	var out []string
	for _, s := range t.Steps {
		out = append(out, s.Type+":"+s.Name+":"+s.ParentStepID)
	}
	return out
}

func TestConvertMapsGenAIAndOpenInferenceSpans(t *testing.T) {
	cs, _ := Convert(agentRun(true))
	require.Len(t, cs, 1)
	c := cs[0]
	assert.True(t, c.Complete, "the root span is there")
	tr := c.Trace
	assert.Equal(t, tid.String(), tr.TraceID)
	assert.Equal(t, "shop-bot", tr.AgentName)
	assert.Equal(t, "conv-9", tr.Metadata["conversation_id"])
	root := sid(1).String()
	assert.Equal(t, []string{
		"decision:shop-bot:", "llm_call:gpt-4o:" + root, "tool_call:send_email:" + root,
		"tool_call:lookup:" + root, // its HTTP parent is not agent activity: the nearest agent ancestor is
		"llm_call:claude:" + root,
	}, steps(tr))
	assert.Equal(t, map[string]any{"to": "x@evil.example"}, tr.Steps[2].Input, "JSON-string arguments are parsed")
	assert.Equal(t, "sent", tr.Steps[2].Output)
	assert.Equal(t, map[string]any{"q": 1.0}, tr.Steps[3].Input)
	assert.Equal(t, []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "hello"}}, tr.Steps[4].Input)
	assert.Equal(t, "2026-11-30T10:00:02Z", tr.Steps[2].Timestamp)

	partial, _ := Convert(agentRun(false))
	require.Len(t, partial, 1)
	assert.False(t, partial[0].Complete, "no root span yet: the run is still going")
}

func TestParseOTLPJSONFile(t *testing.T) {
	b, err := ptraceotlp.NewExportRequestFromTraces(agentRun(true)).MarshalJSON()
	require.NoError(t, err)
	assert.True(t, LooksLikeJSON(b))
	tr, err := Parse(b, trace.DefaultLimits())
	require.NoError(t, err)
	assert.Len(t, tr.Steps, 5)

	_, err = Parse([]byte(`{"resourceSpans": []}`), trace.DefaultLimits())
	assert.ErrorContains(t, err, "no agent spans")
	_, err = Parse([]byte(`{"resourceSpans": 7}`), trace.DefaultLimits())
	assert.ErrorContains(t, err, "not an OTLP trace export")
}

// Spans without a trace id (found by FuzzOTLP) are rejected, never made a
// trace with an empty id.
func TestSpansWithoutTraceIDAreRejected(t *testing.T) {
	doc := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}}]}]}]}]}`
	td, err := Decode([]byte(doc), "application/json")
	require.NoError(t, err)
	runs, rejected := Convert(td)
	assert.Empty(t, runs)
	assert.Equal(t, 1, rejected)
	_, err = Parse([]byte(doc), trace.DefaultLimits())
	assert.ErrorContains(t, err, "1 span(s) have no traceId")
}

// A parent-span cycle through spans troy skips looped forever (found by
// probing); one among agent spans is rejected like any parent cycle.
func TestParentSpanCycles(t *testing.T) {
	const skipped = `{"resourceSpans":[{"scopeSpans":[{"spans":[
 {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"aaaaaaaaaaaaaaaa","parentSpanId":"aaaaaaaaaaaaaaaa","name":"plain","startTimeUnixNano":"1000"},
 {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"cccccccccccccccc","parentSpanId":"aaaaaaaaaaaaaaaa","name":"tool","startTimeUnixNano":"1500",
  "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"bash"}}]}]}]}]}`
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr, err := Parse([]byte(skipped), trace.DefaultLimits())
		require.NoError(t, err)
		require.Len(t, tr.Steps, 1)
		assert.Empty(t, tr.Steps[0].ParentStepID, "no agent span above it")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("conversion did not end")
	}

	tool := func(id, parent string) string {
		return `{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"` + id + `","parentSpanId":"` + parent + `","name":"t","startTimeUnixNano":"1000",
  "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"gen_ai.tool.name","value":{"stringValue":"bash"}}]}`
	}
	kept := `{"resourceSpans":[{"scopeSpans":[{"spans":[` + tool("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb") + "," + tool("bbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaa") + `]}]}]}`
	_, err := Parse([]byte(kept), trace.DefaultLimits())
	assert.ErrorContains(t, err, "parent links form a cycle")
}
