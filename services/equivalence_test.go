package services_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/stream/streamtest"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
	"github.com/troy-audit/troy/services/streamer"
)

// benchPolicy has a rule of every kind the streamer must get right: decided
// on arrival, decided when a later step makes it true (pii-exfiltration),
// one reading the agent's metadata (privilege-escalation: its metadata
// comes with the end here), and one that needs the whole trace
// (first-step-must-not-be-tool: len(next_steps) == len(steps) - 1).
func benchPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	b, err := os.ReadFile("../pkg/policy/testdata/bench_policy.yaml")
	require.NoError(t, err)
	p, err := policy.Parse(b)
	require.NoError(t, err)
	return p
}

// streamTrace sends a trace as a client would: its steps a few at a time,
// then its end, carrying the agent and metadata (or, upFront, a start with
// them first).
func streamTrace(t *testing.T, js jetstream.JetStream, tr *trace.Trace, upFront bool) {
	t.Helper()
	ctx := context.Background()
	meta, _ := json.Marshal(stream.Start{AgentName: tr.AgentName, Metadata: tr.Metadata})
	if upFront {
		m := nats.NewMsg(streamSubject(bus.StreamStart, tr.TraceID))
		m.Data = meta
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	for i := 0; i < len(tr.Steps); {
		n := min(1+i%3, len(tr.Steps)-i)
		body, err := json.Marshal(tr.Steps[i : i+n])
		require.NoError(t, err)
		m := nats.NewMsg(streamSubject(bus.StreamStep, tr.TraceID))
		m.Data = body
		_, err = js.PublishMsgAsync(m)
		require.NoError(t, err)
		i += n
	}
	<-js.PublishAsyncComplete()
	end := nats.NewMsg(streamSubject(bus.StreamEnd, tr.TraceID))
	if !upFront {
		end.Data = meta
	}
	_, err := js.PublishMsg(ctx, end)
	require.NoError(t, err)
}

// TestStreamedFindingsEqualTheBatchAudit streams the shipped examples and
// generated 1,000-step traces, with their metadata sent at the end (and
// once up front), and checks that the findings published while they
// streamed are exactly the batch audit's violations of the same traces:
// nothing extra (a metadata rule decided before the metadata came would
// be a false critical alert), nothing missing, nothing twice; and that
// their reports score them as the batch audit does.
func TestStreamedFindingsEqualTheBatchAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 3,000+ steps")
	}
	srv, engine := startStreamingWith(t, benchPolicy(t), streamer.DefaultConfig().IdleTimeout)
	reports := subscribe(t, srv.NC, "troy.report.live")

	var traces []*trace.Trace
	files, _ := filepath.Glob("../examples/traces/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tr, err := trace.ParseAny(b, trace.DefaultLimits(), "", f)
		require.NoError(t, err, f)
		traces = append(traces, tr)
	}
	for i := range 3 {
		b, err := json.Marshal(tracegen.Trace(11, i, 1000))
		require.NoError(t, err)
		tr, err := trace.Parse(b, trace.DefaultLimits())
		require.NoError(t, err)
		traces = append(traces, tr)
	}
	scores := map[string]int{}
	for i, tr := range traces {
		scores[tr.TraceID] = score.Compute(engine.Evaluate(tr).Violations).RiskScore
		streamTrace(t, srv.JS, tr, i == 0)
	}
	for range traces {
		var rep events.Reported
		require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
		assert.Equal(t, scores[rep.Audit.Trace.TraceID], rep.Audit.RiskScore, rep.Audit.Trace.TraceID)
	}
	time.Sleep(200 * time.Millisecond) // findings come before their report; let the last ones land
	want := streamtest.Batch(engine, traces...)
	require.NotEmpty(t, want)
	streamtest.AssertSame(t, want, streamtest.Findings(t, srv.JS))

	// Ended traces leave the step log: it keeps only what open traces need,
	// and each partition's last message (it may not be acknowledged yet:
	// a message purged before its ack would never be redelivered).
	steps, err := srv.JS.Stream(context.Background(), pipelines.StreamSteps)
	require.NoError(t, err)
	topo, err := pipelines.Load()
	require.NoError(t, err)
	parts := uint64(bus.StreamPartitions(topo))
	require.Eventually(t, func() bool {
		info, err := steps.Info(context.Background())
		return err == nil && info.State.Msgs <= parts
	}, 10*time.Second, 50*time.Millisecond, "the log of ended traces is purged")
}
