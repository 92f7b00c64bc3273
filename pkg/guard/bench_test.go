package guard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/httpapi"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/templates"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/guardserver"
)

// benchRequest is a typical check: a shell call with a few prior steps.
func benchRequest() guard.Request {
	return guard.Request{
		Policy: "agent_safety",
		Action: guard.Action{Name: "bash", Input: map[string]any{"cmd": "ls -la /var/log && df -h"}},
		History: []*trace.Step{
			{StepID: "1", Type: "observation", Name: "user", Output: "How much disk is free?"},
			{StepID: "2", Type: "llm_call", Name: "assistant", Output: "I'll check with df."},
			{StepID: "3", Type: "tool_call", Name: "bash", Input: map[string]any{"cmd": "whoami"}},
			{StepID: "4", Type: "observation", Name: "bash", Output: "ubuntu"},
		},
	}
}

func agentSafety(b *testing.B) *policy.Engine {
	b.Helper()
	p, err := templates.Load("agent_safety")
	if err != nil {
		b.Fatal(err)
	}
	e, err := policy.Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// measure checks req through g until the benchmark ends and reports p50
// and p99 latency; every check must allow.
func measure(b *testing.B, g guard.Guard, req guard.Request) {
	b.Helper()
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		d, err := g.Check(ctx, req)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if d.Decision != guard.Allow {
			b.Fatalf("unexpected decision %+v", d)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Nanoseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

func BenchmarkGuardInProcess(b *testing.B) {
	g := &guard.Local{Policies: guard.Static{E: agentSafety(b)}}
	measure(b, g, benchRequest())
}

// BenchmarkGuardInProcessRecorded is the same check with every decision
// recorded in the decision ledger (queued; written in batches).
func BenchmarkGuardInProcessRecorded(b *testing.B) {
	srv, _ := bustest.Provisioned(b)
	rec, err := ledger.OpenBatcher(context.Background(), srv.JS, "guard-bench", "bench", ledger.BatcherOptions{Queue: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	g := &guard.Local{Policies: guard.Static{E: agentSafety(b)}, Recorder: guard.LedgerRecorder{L: rec}}
	measure(b, g, benchRequest())
	if err := rec.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func startBenchGuard(b *testing.B) (*bustest.Server, *policystore.Store) {
	b.Helper()
	srv, deps := bustest.Provisioned(b)
	store, err := policystore.Open(context.Background(), srv.JS)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Push(context.Background(), agentSafety(b).Policy()); err != nil {
		b.Fatal(err)
	}
	svc, err := guardserver.New(context.Background(), srv.NC, deps, prometheus.NewRegistry(), guardserver.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	if err := store.Watch(ctx); err != nil {
		b.Fatal(err)
	}
	return srv, store
}

func BenchmarkGuardNATS(b *testing.B) {
	srv, _ := startBenchGuard(b)
	g := &guard.NATS{Conn: srv.NC}
	req := benchRequest()
	ctx := context.Background()
	for range 100 { // warm up: subscription, policy compiled
		if d, err := g.Check(ctx, req); err != nil || d.Reason != "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	measure(b, g, req)
}

func BenchmarkGuardHTTP(b *testing.B) {
	_, store := startBenchGuard(b)
	web := httptest.NewServer(httpapi.Guard(&guard.Local{Policies: store}))
	b.Cleanup(web.Close)
	g := &guard.HTTP{URL: web.URL, Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	measure(b, g, benchRequest())
}
