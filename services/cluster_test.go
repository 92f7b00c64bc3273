package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/tracegen"
)

// TestABatchSurvivesLosingANode audits a batch on a 3-node cluster (R3
// streams and buckets) and shuts a node down a third of the way through,
// bringing it back two seconds later: every trace is reported exactly once,
// and no service is restarted.
func TestABatchSurvivesLosingANode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a batch across a leader election")
	}
	const n, steps = 600, 8
	c := bustest.RunCluster(t, 3)
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	deps, err := bus.NewDeps(js, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), prometheus.NewRegistry())
	require.NoError(t, err)
	deps.Topology.Replicas = 3
	ctx := context.Background()
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return bus.Provision(pctx, js, deps.Topology) == nil
	}, 60*time.Second, 200*time.Millisecond)
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
			go func() { // whichever node leads the meta layer goes
				for _, s := range c.Servers {
					if s.JetStreamIsLeader() {
						name := s.Name()
						s.Shutdown()
						killed <- name
						time.Sleep(2 * time.Second)
						c.Restart(name)
						return
					}
				}
				killed <- "none"
			}()
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

// TestServicesRideOutAWholeClusterRestart: every node of the cluster goes
// down and comes back while the services keep running; they reconnect and
// audit the next batch without being restarted.
func TestServicesRideOutAWholeClusterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: restarts a cluster")
	}
	c := bustest.RunCluster(t, 3)
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	deps, err := bus.NewDeps(js, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), prometheus.NewRegistry())
	require.NoError(t, err)
	deps.Topology.Replicas = 3
	ctx := context.Background()
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return bus.Provision(pctx, js, deps.Topology) == nil
	}, 60*time.Second, 200*time.Millisecond)
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
