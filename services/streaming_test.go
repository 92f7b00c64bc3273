package services_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/httpapi"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/stream/streamtest"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/streamer"
)

const streamingPolicy = `
policy_id: streaming
rules:
  - rule_id: shell
    condition: step.name == 'bash'
    severity: low
  - rule_id: pii-then-external
    condition: get(step, 'metadata.data_classification') == 'pii' and any_next({ get(#, 'metadata.network_zone') == 'external' })
    severity: critical
  - rule_id: booked-unconfirmed
    condition: step.name == 'book' and not any_next({ .name == 'confirm' })
    severity: high
`

func startStreaming(t *testing.T, idle time.Duration) (*bustest.Server, *policy.Policy) {
	t.Helper()
	p, err := policy.Parse([]byte(streamingPolicy))
	require.NoError(t, err)
	srv, _ := startStreamingWith(t, p, idle)
	return srv, p
}

// startStreamingWith starts the pipeline and a streamer whose default
// policy is p (pushed to the store), and returns p compiled, for the batch
// audit a test compares with.
func startStreamingWith(t *testing.T, p *policy.Policy, idle time.Duration) (*bustest.Server, *policy.Engine) {
	t.Helper()
	srv, deps := bustest.Provisioned(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	_, err = store.Push(context.Background(), p)
	require.NoError(t, err)
	engine, err := policy.Compile(p)
	require.NoError(t, err)
	rs := all(t, deps)
	cfg := streamer.DefaultConfig()
	cfg.IdleTimeout, cfg.DefaultPolicy = idle, p.PolicyID
	st, err := streamer.New(context.Background(), deps, cfg)
	require.NoError(t, err)
	rs[len(rs)-1] = st
	start(t, rs...)
	return srv, engine
}

func sendStep(t *testing.T, srv *bustest.Server, traceID, body string) {
	t.Helper()
	m := nats.NewMsg(streamSubject(bus.StreamStep, traceID))
	m.Data = []byte(body)
	m.Header.Set(bus.HeaderAgent, "booking-bot")
	_, err := srv.JS.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

// streamSubject is where a streamed trace's message goes, on the shipped
// topology.
func streamSubject(kind, traceID string) string {
	topo, err := pipelines.Load()
	if err != nil {
		panic(err)
	}
	return bus.StreamSubject(kind, traceID, bus.StreamPartitions(topo))
}

// streamed reads a stream from now on through an ordered consumer: what a
// SIEM consumer sees, after JetStream has dropped republished duplicates
// (a finding republished after a lost revision race carries the same
// Nats-Msg-Id).
func streamed(t *testing.T, srv *bustest.Server, name string) chan *nats.Msg {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cons, err := srv.JS.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	require.NoError(t, err)
	ch := make(chan *nats.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ch <- &nats.Msg{Subject: m.Subject(), Data: m.Data()}
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return ch
}

func finding(t *testing.T, m *nats.Msg) string {
	t.Helper()
	var f ocsf.Finding
	require.NoError(t, json.Unmarshal(m.Data, &f))
	return f.FindingInfo.Analytic.UID + "@" + f.Unmapped["step_id"].(string)
}

func noFinding(t *testing.T, ch chan *nats.Msg) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected finding %s", finding(t, m))
	case <-time.After(300 * time.Millisecond):
	}
}

// TestStreamingAudit streams a trace step by step: a rule decided on arrival
// fires at once, a look-ahead rule fires when the step that makes it true
// arrives, a rule that can change until the end fires at the end, each once;
// then the whole trace is reported as usual.
func TestStreamingAudit(t *testing.T) {
	srv, _ := startStreaming(t, time.Minute)
	findings := streamed(t, srv, pipelines.StreamViolations)
	reports := subscribe(t, srv.NC, "troy.report.live")

	sendStep(t, srv, "run-1", `{"step_id": "1", "type": "tool_call", "name": "crm", "metadata": {"data_classification": "pii"}}`)
	noFinding(t, findings)
	sendStep(t, srv, "run-1", `{"step_id": "2", "type": "tool_call", "name": "bash"}`)
	assert.Equal(t, "shell@2", finding(t, next(t, findings)), "decided on arrival")
	sendStep(t, srv, "run-1", `[{"step_id": "3", "type": "tool_call", "name": "book"}, {"step_id": "2", "type": "tool_call", "name": "bash"}]`)
	noFinding(t, findings) // the booking may yet be confirmed; step 2 again is a duplicate
	sendStep(t, srv, "run-1", `{"step_id": "4", "type": "tool_call", "name": "post", "metadata": {"network_zone": "external"}}`)
	assert.Equal(t, "pii-then-external@1", finding(t, next(t, findings)), "fires when the later step arrives")

	_, err := srv.JS.Publish(context.Background(), streamSubject(bus.StreamEnd, "run-1"), nil)
	require.NoError(t, err)
	assert.Equal(t, "booked-unconfirmed@3", finding(t, next(t, findings)), "decided at the end")

	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Equal(t, "run-1", rep.Audit.Trace.TraceID)
	assert.Equal(t, "booking-bot", rep.Audit.Trace.AgentName)
	assert.Len(t, rep.Audit.Trace.Steps, 4)
	assert.Len(t, rep.Audit.Violations, 3)
	assert.Equal(t, "ended by its sender", rep.Audit.Trace.Metadata["stream_end"])
	noFinding(t, findings) // the final audit publishes no second copy
}

func TestStreamedTraceEndsWhenIdle(t *testing.T) {
	srv, _ := startStreaming(t, 400*time.Millisecond)
	reports := subscribe(t, srv.NC, "troy.report.live")
	sendStep(t, srv, "quiet", `{"step_id": "a", "type": "llm_call"}`)
	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Equal(t, "quiet", rep.Audit.Trace.TraceID)
	assert.Equal(t, "idle for 400ms", rep.Audit.Trace.Metadata["stream_end"])
}

// TestOTLPExportIsStreamed posts an OTLP/HTTP protobuf export of an agent
// run (GenAI spans) to POST /v1/traces: its spans become steps, the root span
// ends the run, and the run is reported.
func TestOTLPExportIsStreamed(t *testing.T) {
	srv, _ := startStreaming(t, time.Minute)
	reports := subscribe(t, srv.NC, "troy.report.live")
	findings := streamed(t, srv, pipelines.StreamViolations)
	web := httptest.NewServer(httpapi.Traces(srv.JS, httpapi.TracesConfig{Limits: trace.DefaultLimits(), Policy: "streaming", Partitions: 8}))
	defer web.Close()

	td := ptrace.NewTraces()
	spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	tid := pcommon.TraceID([16]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	base := time.Now()
	for i, a := range []map[string]any{
		{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "otel-bot"},
		{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash", "gen_ai.tool.call.arguments": `{"cmd": "ls"}`},
	} {
		s := spans.AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(pcommon.SpanID([8]byte{0, 0, 0, 0, 0, 0, 0, byte(i + 1)}))
		if i > 0 {
			s.SetParentSpanID(pcommon.SpanID([8]byte{0, 0, 0, 0, 0, 0, 0, 1}))
		}
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(i) * time.Millisecond)))
		require.NoError(t, s.Attributes().FromRaw(a))
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	require.NoError(t, err)
	resp, err := http.Post(web.URL, "application/x-protobuf", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	assert.Equal(t, "shell@"+pcommon.SpanID([8]byte{0, 0, 0, 0, 0, 0, 0, 2}).String(), finding(t, next(t, findings)))
	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Equal(t, tid.String(), rep.Audit.Trace.TraceID)
	assert.Equal(t, "otel-bot", rep.Audit.Trace.AgentName)
	assert.Len(t, rep.Audit.Trace.Steps, 2)
}

// TestOutOfOrderStepsAreResequenced sends a trace's steps in the wrong
// order (their timestamps say otherwise): the trace is reported in
// timestamp order, and the findings are the batch audit's of that order,
// including a rule on earlier steps (external-after-pii) that only became
// true once an earlier-stamped step arrived late.
func TestOutOfOrderStepsAreResequenced(t *testing.T) {
	p, err := policy.Parse([]byte(streamingPolicy + `
  - rule_id: external-after-pii
    condition: get(step, 'metadata.network_zone') == 'external' and any_prev({ get(#, 'metadata.data_classification') == 'pii' })
    severity: high
`))
	require.NoError(t, err)
	srv, engine := startStreamingWith(t, p, streamer.DefaultConfig().IdleTimeout)
	reports := subscribe(t, srv.NC, "troy.report.live")

	ordered, err := parseTrace([]byte(`{"trace_id": "ooo", "agent_name": "booking-bot", "steps": [
	  {"step_id": "1", "type": "tool_call", "name": "crm", "timestamp": "2026-11-30T10:00:01Z", "metadata": {"data_classification": "pii"}},
	  {"step_id": "2", "type": "tool_call", "name": "post", "timestamp": "2026-11-30T10:00:02Z", "metadata": {"network_zone": "external"}},
	  {"step_id": "3", "type": "tool_call", "name": "book", "timestamp": "2026-11-30T10:00:03Z"},
	  {"step_id": "4", "type": "tool_call", "name": "bash", "timestamp": "2026-11-30T10:00:04Z"}]}`))
	require.NoError(t, err)
	for _, i := range []int{3, 1, 2, 0} { // bash, post, book, then the PII read that came first
		b, err := json.Marshal(ordered.Steps[i])
		require.NoError(t, err)
		sendStep(t, srv, "ooo", string(b))
	}
	_, err = srv.JS.Publish(context.Background(), streamSubject(bus.StreamEnd, "ooo"), nil)
	require.NoError(t, err)
	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	var order []string
	for _, s := range rep.Audit.Trace.Steps {
		order = append(order, s.StepID)
	}
	assert.Equal(t, []string{"1", "2", "3", "4"}, order, "reported in timestamp order")
	time.Sleep(200 * time.Millisecond)
	streamtest.AssertSame(t, streamtest.Batch(engine, ordered), streamtest.Findings(t, srv.JS))
}

// TestStreamingEndpointsRefuseUpFront: what the streamer could not take is
// refused by the HTTP API at once (never a 202 and then a dead letter only
// the log mentions): an unknown policy, no policy at all, steps or an end
// after the trace ended, a start after steps, metadata at the end of a
// trace started with it.
func TestStreamingEndpointsRefuseUpFront(t *testing.T) {
	srv, _ := startStreaming(t, time.Minute)
	ctx := context.Background()
	store, err := policystore.Open(ctx, srv.JS)
	require.NoError(t, err)
	kv, err := srv.JS.KeyValue(ctx, pipelines.BucketStreams)
	require.NoError(t, err)
	log, err := srv.JS.Stream(ctx, pipelines.StreamSteps)
	require.NoError(t, err)
	api := httpapi.Streaming{Pub: srv.JS, Policies: store, State: kv, Log: log, Partitions: 8, Limits: trace.DefaultLimits(), Policy: "streaming"}
	noDefault := api
	noDefault.Policy = ""
	mux := http.NewServeMux()
	mux.Handle("POST /v1/traces/{trace_id}/start", api.Start())
	mux.Handle("POST /v1/traces/{trace_id}/steps", api.Steps())
	mux.Handle("POST /v1/traces/{trace_id}/end", api.End())
	mux.Handle("POST /nodefault/{trace_id}/steps", noDefault.Steps())
	mux.Handle("POST /v1/traces", httpapi.Traces(srv.JS, httpapi.TracesConfig{Limits: trace.DefaultLimits(), Policy: "streaming", Policies: store, Partitions: 8}))
	web := httptest.NewServer(mux)
	defer web.Close()
	reports := subscribe(t, srv.NC, "troy.report.live")
	post := func(path, body string) (int, string) {
		resp, err := http.Post(web.URL+path, "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var pr httpapi.Problem
		_ = json.NewDecoder(resp.Body).Decode(&pr)
		return resp.StatusCode, pr.Error
	}
	step := `{"step_id": "1", "type": "tool_call", "name": "bash"}`

	code, msg := post("/v1/traces/t1/steps?policy=no-such-policy", step)
	assert.Equal(t, http.StatusUnprocessableEntity, code)
	assert.Contains(t, msg, `policy "no-such-policy"`)
	code, _ = post("/v1/traces?policy=no-such-policy", `{"trace_id": "x", "steps": [`+step+`]}`)
	assert.Equal(t, http.StatusUnprocessableEntity, code)
	code, msg = post("/nodefault/t1/steps", step)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, msg, "no policy")

	code, _ = post("/v1/traces/t2/start", `{"agent_name": "bot", "metadata": {"permission_level": "user"}}`)
	assert.Equal(t, http.StatusAccepted, code)
	code, msg = post("/v1/traces/t2/start", `{"agent_name": "bot"}`)
	assert.Equal(t, http.StatusConflict, code, msg)
	code, _ = post("/v1/traces/t2/steps", step)
	assert.Equal(t, http.StatusAccepted, code)
	code, msg = post("/v1/traces/t2/end", `{"metadata": {"permission_level": "admin"}}`)
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, msg, "started with its agent and metadata")
	code, _ = post("/v1/traces/t2/end", "")
	assert.Equal(t, http.StatusAccepted, code)
	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Equal(t, "user", rep.Audit.Trace.Metadata["permission_level"], "the start's metadata stands")
	require.Eventually(t, func() bool {
		code, _ := post("/v1/traces/t2/steps", `{"step_id": "2", "type": "llm_call"}`)
		return code == http.StatusConflict
	}, 5*time.Second, 20*time.Millisecond, "a step after the end is refused")
	code, msg = post("/v1/traces/t2/end", "")
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, msg, "has ended")

	code, _ = post("/v1/traces/never/end", "")
	assert.Equal(t, http.StatusNotFound, code, "nothing to end")
	big, _ := json.Marshal(func() []map[string]any {
		var out []map[string]any
		for i := range 10001 {
			out = append(out, map[string]any{"step_id": fmt.Sprint(i), "type": "llm_call"})
		}
		return out
	}())
	code, msg = post("/v1/traces/big/steps", string(big))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, "one request over an open trace's limits is refused, not taken and dropped")
	assert.Contains(t, msg, "10001 steps")

	code, _ = post("/v1/traces/t4/start", `{"agent_name": "bot", "metadata": {"permission_level": "user"}}`)
	assert.Equal(t, http.StatusAccepted, code)
	code, _ = post("/v1/traces/t4/end", `{}`)
	assert.Equal(t, http.StatusAccepted, code, "an empty end body changes nothing")
	require.Eventually(t, func() bool {
		code, _ := post("/v1/traces/t4/steps", step)
		return code == http.StatusConflict
	}, 5*time.Second, 20*time.Millisecond, "a trace ended with no steps is ended too")

	code, _ = post("/v1/traces/t3/steps", step)
	assert.Equal(t, http.StatusAccepted, code)
	require.Eventually(t, func() bool {
		code, _ := post("/v1/traces/t3/start", `{"agent_name": "bot"}`)
		return code == http.StatusConflict
	}, 5*time.Second, 20*time.Millisecond, "a start after steps is refused")
}

// An idle end sent by a process that saw the trace only up to an earlier
// message (it lost the partition meanwhile) does not end a trace that got
// steps since; the sender's end does.
func TestStaleIdleEndLeavesALiveTraceOpen(t *testing.T) {
	srv, _ := startStreaming(t, time.Minute)
	reports := subscribe(t, srv.NC, "troy.report.live")
	sendStep(t, srv, "busy", `{"step_id": "1", "type": "llm_call"}`)
	sendStep(t, srv, "busy", `{"step_id": "2", "type": "llm_call"}`)
	stale := nats.NewMsg(streamSubject(bus.StreamEnd, "busy"))
	stale.Data = []byte(`{"reason": "idle for 1m0s"}`)
	stale.Header.Set(streamer.HeaderIdleAfter, "1") // as of a message before step 2
	_, err := srv.JS.PublishMsg(context.Background(), stale)
	require.NoError(t, err)
	select {
	case m := <-reports:
		t.Fatalf("a stale idle end ended the trace: %s", m.Data)
	case <-time.After(500 * time.Millisecond):
	}
	_, err = srv.JS.Publish(context.Background(), streamSubject(bus.StreamEnd, "busy"), nil)
	require.NoError(t, err)
	var rep events.Reported
	require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
	assert.Len(t, rep.Audit.Trace.Steps, 2)
	assert.Equal(t, "ended by its sender", rep.Audit.Trace.Metadata["stream_end"])
}
