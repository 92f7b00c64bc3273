package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/natsembed"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/stream/streamtest"
	"github.com/troy-audit/troy/pkg/tracegen"
	"github.com/troy-audit/troy/services/streamer"
)

// TestABatchSurvivesLosingANode audits a batch on a 3-node cluster (R3
// streams and buckets) and shuts a node down a third of the way through,
// bringing it back two seconds later: every trace is reported exactly once,
// and no service is restarted.
func TestABatchSurvivesLosingANode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a batch across a leader election")
	}
	n, steps := 600, 8
	if v, err := strconv.Atoi(os.Getenv("TROY_TEST_HA_TRACES")); err == nil && v > 0 {
		n = v // e.g. 10000, by hand: the CI machine runs the 600 under the race detector
	}
	c, js, deps := bustest.ProvisionedCluster(t)
	ctx := context.Background()
	start(t, all(t, deps)...)

	inputs := func(yield func(auditor.Input) bool) {
		for i := range n {
			b, _ := json.Marshal(tracegen.Trace(7, i, steps))
			if !yield(auditor.Input{Source: fmt.Sprintf("t%d.json", i), Data: b}) {
				return
			}
		}
	}
	var mu sync.Mutex
	reported := map[string]int{}
	killed := make(chan string, 1)
	sink := func(o auditor.Outcome) error {
		mu.Lock()
		defer mu.Unlock()
		if o.Audit != nil {
			var a report.Audit
			if err := json.Unmarshal(o.Audit, &a); err != nil {
				return err
			}
			reported[a.Trace.TraceID]++
		}
		if len(reported) == n/3 {
			go func() { killed <- c.KillLeader(2 * time.Second) }() // whichever node leads the cluster goes
		}
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	entries, err := auditor.Submit(sctx, js, auditor.Config{Run: "ha", Policy: examplePolicy(t), Window: 32, IdleTimeout: 2 * time.Minute}, inputs, n, sink)
	if err != nil {
		for _, cons := range deps.Topology.Durables() {
			if ci, ierr := js.Consumer(ctx, cons.Stream, cons.Name); ierr == nil {
				info := ci.CachedInfo()
				t.Logf("%s/%s: pending %d, ack pending %d, redelivered %d, waiting %d, delivered %d", cons.Stream, cons.Name,
					info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting, info.Delivered.Consumer)
			}
		}
	}
	require.NoError(t, err)
	t.Logf("shut down %s after %d reports", <-killed, n/3)
	require.Len(t, entries, n)
	for _, e := range entries {
		assert.Equal(t, report.StatusAudited, e.Status, "%s: %v", e.Source, e.Problems)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, reported, n, "every trace reported")
	for id, k := range reported {
		assert.Equal(t, 1, k, "%s reported once", id)
	}
}

// TestStreamingSurvivesLosingANode streams eight 120-step traces step by
// step while the node leading the cluster goes and comes back: every trace
// is reported whole, once, and the findings are exactly the batch audit's.
func TestStreamingSurvivesLosingANode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: streams across a leader election")
	}
	c, js, deps := bustest.ProvisionedCluster(t)
	ctx := context.Background()
	p, err := policy.Load("../pkg/policy/testdata/bench_policy.yaml")
	require.NoError(t, err)
	store, err := policystore.Open(ctx, js)
	require.NoError(t, err)
	_, err = store.Push(ctx, p)
	require.NoError(t, err)
	engine, err := policy.Compile(p)
	require.NoError(t, err)
	rs := all(t, deps)
	cfg := streamer.DefaultConfig()
	cfg.DefaultPolicy = p.PolicyID
	st, err := streamer.New(ctx, deps, cfg)
	require.NoError(t, err)
	rs[len(rs)-1] = st
	start(t, rs...)

	const traces, steps = 8, 120
	var all []*traceT
	for i := range traces {
		raw, _ := json.Marshal(tracegen.Trace(21, i, steps))
		tr, err := parseTrace(raw)
		require.NoError(t, err)
		all = append(all, tr)
	}
	parts := bus.StreamPartitions(deps.Topology)
	send := func(kind, id string, body []byte, msgID string) {
		t.Helper()
		require.NoError(t, bus.Publish(ctx, js, bus.Out{Subject: bus.StreamSubject(kind, id, parts), Data: body, MsgID: msgID}))
	}
	killed := ""
	for s := range steps {
		for _, tr := range all {
			body, _ := json.Marshal(tr.Steps[s])
			send(bus.StreamStep, tr.TraceID, body, fmt.Sprintf("%s-%d", tr.TraceID, s))
		}
		if s == steps/2 {
			killed = c.KillLeader(2 * time.Second)
		}
	}
	for _, tr := range all {
		body, _ := json.Marshal(stream.Start{AgentName: tr.AgentName, Metadata: tr.Metadata})
		send(bus.StreamEnd, tr.TraceID, body, tr.TraceID+"-end")
	}
	t.Logf("shut down %s after %d steps of each trace", killed, steps/2)

	reported := map[string]int{}
	require.Eventually(t, func() bool {
		clear(reported)
		cons, err := js.OrderedConsumer(ctx, pipelines.StreamOutcomes, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"troy.report.live"}})
		if err != nil {
			return false
		}
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				break
			}
			var rep struct {
				Audit struct {
					Trace struct {
						TraceID string `json:"trace_id"`
						Steps   []any  `json:"steps"`
					} `json:"trace"`
				} `json:"audit"`
			}
			if json.Unmarshal(m.Data(), &rep) == nil && len(rep.Audit.Trace.Steps) == steps {
				reported[rep.Audit.Trace.TraceID]++
			}
		}
		return len(reported) == traces
	}, 2*time.Minute, time.Second, "every trace reported whole")
	for id, n := range reported {
		assert.Equal(t, 1, n, "%s reported once", id)
	}
	time.Sleep(300 * time.Millisecond)
	streamtest.AssertSame(t, streamtest.Batch(engine, all...), streamtest.Findings(t, js))
}

// TestServicesRideOutAWholeClusterRestart: every node of the cluster goes
// down and comes back while the services keep running; they reconnect and
// audit the next batch without being restarted.
func TestServicesRideOutAWholeClusterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: restarts a cluster")
	}
	c, js, deps := bustest.ProvisionedCluster(t)
	ctx := context.Background()
	start(t, all(t, deps)...)

	batch := func(run string, n int) {
		t.Helper()
		inputs := func(yield func(auditor.Input) bool) {
			for i := range n {
				b, _ := json.Marshal(tracegen.Trace(11, i, 6))
				if !yield(auditor.Input{Source: fmt.Sprintf("%s-%d.json", run, i), Data: b}) {
					return
				}
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		entries, err := auditor.Submit(sctx, js, auditor.Config{Run: run, Policy: examplePolicy(t), Window: 16, IdleTimeout: 2 * time.Minute},
			inputs, n, func(auditor.Outcome) error { return nil })
		require.NoError(t, err)
		require.Len(t, entries, n)
		for _, e := range entries {
			assert.Equal(t, report.StatusAudited, e.Status, "%s: %v", e.Source, e.Problems)
		}
	}
	batch("before", 40)
	var names []string
	for _, s := range c.Servers {
		names = append(names, s.Name())
		s.Shutdown()
	}
	time.Sleep(time.Second)
	for _, name := range names {
		c.Restart(name)
	}
	require.Eventually(t, func() bool {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the cluster elects a leader again")
	require.Eventually(t, func() bool { // the streams' own leaders, a few seconds later
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Stream(sctx, "TROY_OUTCOMES")
		return err == nil
	}, 60*time.Second, 200*time.Millisecond, "the streams are served again")
	batch("after", 40) // by the same services, never restarted
}

// TestAFullStoreIsReportedNotDropped fills the JetStream store (a limit
// standing in for a full disk) with a batch: the batch ends with an error
// that says so, within its idle timeout, no service crashes, and what was
// reported is whole.
func TestAFullStoreIsReportedNotDropped(t *testing.T) {
	srv, deps := bustest.ProvisionedWith(t, natsembed.Config{MaxStore: 4 << 20})
	start(t, all(t, deps)...)
	const n = 400
	inputs := func(yield func(auditor.Input) bool) {
		for i := range n {
			b, _ := json.Marshal(tracegen.Trace(5, i, 40))
			if !yield(auditor.Input{Source: fmt.Sprintf("full-%d.json", i), Data: b}) {
				return
			}
		}
	}
	reported := 0
	sink := func(o auditor.Outcome) error {
		if o.Audit != nil {
			var a report.Audit
			if err := json.Unmarshal(o.Audit, &a); err != nil {
				return err
			}
			if len(a.Trace.Steps) != 40 {
				return fmt.Errorf("%s reported with %d steps", a.Trace.TraceID, len(a.Trace.Steps))
			}
			reported++
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := auditor.Submit(ctx, srv.JS, auditor.Config{Run: "full", Policy: examplePolicy(t), Window: 16, IdleTimeout: 20 * time.Second}, inputs, n, sink)
	require.Error(t, err, "a batch that cannot be stored does not end as if it had")
	t.Logf("%d of %d reported before: %v", reported, n, err)
	assert.Less(t, reported, n)
	assert.Regexp(t, `insufficient resources|the JetStream store is full`, err.Error(), "the error says why")
}
