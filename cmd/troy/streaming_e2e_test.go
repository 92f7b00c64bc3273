package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/stream/streamtest"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

var streamerSteps = regexp.MustCompile(`(?m)^troy_streamer_steps_total (\d+)`)
var streamerRebuilds = regexp.MustCompile(`(?m)^troy_streamer_trace_rebuilds_total (\d+)`)

// TestStreamerKilledMidStream runs three `troy serve --target streamer`
// processes on one NATS server: members 1/2 and 2/2 share the partitions,
// a third reads all of them and stands by. While eight 300-step traces
// stream in, member 1/2 is killed with SIGKILL: the standby is pinned to
// its partitions, rebuilds their open traces from the step log, and the
// findings on troy.violations.> are exactly the batch audit's, none lost,
// none repeated.
func TestStreamerKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: waits for a partition to change hands")
	}
	dir := t.TempDir()
	srv := bustest.RunServer(t)
	policyFile, err := filepath.Abs("../../pkg/policy/testdata/bench_policy.yaml")
	require.NoError(t, err)

	type proc struct {
		cmd  *exec.Cmd
		http string
	}
	start := func(targets string, extra ...string) proc {
		cmd, httpURL := serveTarget(t, dir, srv.URL, targets, append([]string{"--policy", policyFile}, extra...)...)
		return proc{cmd, httpURL}
	}
	start("ingest,graph,evaluator,explainer,scorer,reporter")
	streamers := []proc{start("streamer", "--stream-member", "1/2"), start("streamer", "--stream-member", "2/2")}
	var standby proc
	metric := func(p proc, re *regexp.Regexp) int {
		body, _ := get(t, p.http+"/metrics")
		m := re.FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}

	nc, err := nats.Connect(srv.URL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	reports := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("troy.report.live", reports)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	b, err := os.ReadFile(policyFile)
	require.NoError(t, err)
	p, err := policy.Parse(b)
	require.NoError(t, err)
	engine, err := policy.Compile(p)
	require.NoError(t, err)
	topo, err := pipelines.Load()
	require.NoError(t, err)
	parts := bus.StreamPartitions(topo)

	const traces, steps = 8, 300
	var all []*trace.Trace
	for i := range traces {
		raw, err := json.Marshal(tracegen.Trace(21, i, steps))
		require.NoError(t, err)
		tr, err := trace.Parse(raw, trace.DefaultLimits())
		require.NoError(t, err)
		all = append(all, tr)
	}
	ctx := context.Background()
	killed := -1
	for s := range steps {
		for _, tr := range all {
			body, err := json.Marshal(tr.Steps[s])
			require.NoError(t, err)
			m := nats.NewMsg(bus.StreamSubject(bus.StreamStep, tr.TraceID, parts))
			m.Data = body
			_, err = js.PublishMsg(ctx, m)
			require.NoError(t, err)
		}
		time.Sleep(2 * time.Millisecond) // a stream, not a burst
		if s == 0 {
			// A partition is pinned to whichever waiting pull gets its first
			// message, so the standby starts only once the members hold every
			// partition that carries traffic; started earlier, it may win one.
			for wait := time.Now(); metric(streamers[0], streamerSteps)+metric(streamers[1], streamerSteps) < traces; {
				require.Less(t, time.Since(wait), 30*time.Second, "the members took the first step of every trace")
				time.Sleep(20 * time.Millisecond)
			}
			standby = start("streamer")
		}
		if s == steps/2 {
			a, b, c := metric(streamers[0], streamerSteps), metric(streamers[1], streamerSteps), metric(standby, streamerSteps)
			t.Logf("steps taken before the kill: member 1/2 %d, member 2/2 %d, standby %d", a, b, c)
			assert.Positive(t, a, "the members share the load")
			assert.Positive(t, b, "the members share the load")
			assert.Zero(t, c, "the standby waits")
			killed = 0
			require.NoError(t, streamers[killed].cmd.Process.Kill()) // SIGKILL: no goodbye
		}
	}
	for _, tr := range all {
		body, _ := json.Marshal(stream.Start{AgentName: tr.AgentName, Metadata: tr.Metadata})
		m := nats.NewMsg(bus.StreamSubject(bus.StreamEnd, tr.TraceID, parts))
		m.Data = body
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	deadline := time.After(90 * time.Second)
	for len(seen) < traces {
		select {
		case m := <-reports:
			var rep struct {
				Audit struct {
					Trace struct {
						TraceID string `json:"trace_id"`
						Steps   []any  `json:"steps"`
					} `json:"trace"`
				} `json:"audit"`
			}
			require.NoError(t, json.Unmarshal(m.Data, &rep))
			assert.Len(t, rep.Audit.Trace.Steps, steps, "%s reported whole", rep.Audit.Trace.TraceID)
			seen[rep.Audit.Trace.TraceID] = true
		case <-deadline:
			t.Fatalf("only %d of %d traces were reported", len(seen), traces)
		}
	}
	t.Logf("the standby rebuilt %d traces", metric(standby, streamerRebuilds))
	assert.Positive(t, metric(standby, streamerRebuilds), "the standby took over the killed member's open traces")
	time.Sleep(300 * time.Millisecond)
	streamtest.AssertSame(t, streamtest.Batch(engine, all...), streamtest.Findings(t, js))
}
