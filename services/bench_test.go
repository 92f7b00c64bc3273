package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/services/streamer"
)

// BenchmarkStreamingLatency offers 1,000 steps/s (spread over 50 traces) to
// the streamer and measures, per step, the time from its publish to its
// finding on troy.violations.> (every step breaks a rule decided on
// arrival). Reports p50 and p99.
func BenchmarkStreamingLatency(b *testing.B) {
	srv, deps := bustest.Provisioned(b)
	p, err := policy.Parse([]byte("policy_id: bench\nrules:\n  - rule_id: every-tool\n    condition: step.type == 'tool_call'\n"))
	if err != nil {
		b.Fatal(err)
	}
	store, _ := policystore.Open(context.Background(), srv.JS)
	if _, err := store.Push(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	cfg := streamer.DefaultConfig()
	cfg.DefaultPolicy = "bench"
	st, err := streamer.New(context.Background(), deps, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var mu sync.Mutex
	sent := map[string]time.Time{}
	var lat []time.Duration
	got := make(chan struct{}, 100000)
	sub, err := srv.NC.Subscribe("troy.violations.>", func(m *nats.Msg) {
		now := time.Now()
		var f ocsf.Finding
		if json.Unmarshal(m.Data, &f) != nil {
			return
		}
		key := fmt.Sprint(f.Unmapped["trace_id"], "/", f.Unmapped["step_id"])
		mu.Lock()
		if t0, ok := sent[key]; ok {
			lat = append(lat, now.Sub(t0))
		}
		mu.Unlock()
		got <- struct{}{}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	const rate, traces = 1000, 50
	n := max(b.N, 2000)
	b.ResetTimer()
	tick := time.NewTicker(time.Second / rate)
	for i := range n {
		<-tick.C
		traceID := fmt.Sprintf("bench-%d", i%traces)
		stepID := fmt.Sprint(i / traces)
		msg := nats.NewMsg(streamSubject(bus.StreamStep, traceID))
		msg.Data = []byte(`{"step_id": "` + stepID + `", "type": "tool_call", "name": "t"}`)
		mu.Lock()
		sent[traceID+"/"+stepID] = time.Now()
		mu.Unlock()
		if _, err := srv.JS.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-got:
		case <-deadline:
			b.Fatalf("only part of the findings arrived")
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(float64(len(lat)-1)*q)].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat)), "findings")
}
