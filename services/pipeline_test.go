// Component tests of the services together on a real embedded JetStream
// server: the happy path, the dead-letter path of every stage, and the
// reporter's durable join.
package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/services/evaluator"
	"github.com/troy-audit/troy/services/explainer"
	"github.com/troy-audit/troy/services/graph"
	"github.com/troy-audit/troy/services/ingest"
	"github.com/troy-audit/troy/services/reporter"
	"github.com/troy-audit/troy/services/scorer"
	"github.com/troy-audit/troy/services/streamer"
)

type runner interface{ Run(context.Context) error }

// start runs services until the test ends and checks they stop cleanly.
func start(t *testing.T, rs ...runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(rs))
	for _, r := range rs {
		wg.Go(func() { errs <- r.Run(ctx) })
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				assert.NoError(t, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func all(t *testing.T, deps bus.Deps) []runner {
	t.Helper()
	ctx := context.Background()
	in, err := ingest.New(deps, ingest.DefaultConfig())
	require.NoError(t, err)
	gr, err := graph.New(deps, graph.DefaultConfig())
	require.NoError(t, err)
	ev, err := evaluator.New(ctx, deps, evaluator.DefaultConfig())
	require.NoError(t, err)
	ex, err := explainer.New(deps, explainer.DefaultConfig())
	require.NoError(t, err)
	sc, err := scorer.New(deps, scorer.DefaultConfig())
	require.NoError(t, err)
	rp, err := reporter.New(ctx, deps, reporter.DefaultConfig())
	require.NoError(t, err)
	st, err := streamer.New(ctx, deps, streamer.DefaultConfig())
	require.NoError(t, err)
	return []runner{in, gr, ev, ex, sc, rp, st}
}

func examplePolicy(t *testing.T) *policy.Engine {
	t.Helper()
	p, err := policy.Load("../examples/policy.yaml")
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)
	return e
}

func TestPipelineAuditsExamplesAndRejectsBadInput(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	start(t, all(t, deps)...)

	files, total, err := auditor.ListDir("../examples/traces")
	require.NoError(t, err)
	inputs := func(yield func(auditor.Input) bool) {
		for in := range auditor.ReadDir("../examples/traces", files, 0) {
			if !yield(in) {
				return
			}
		}
		yield(auditor.Input{Source: "broken.json", Data: []byte(`{"trace_id": "x", "steps": [{"step_id": "1", "type": "teleport"}]}`)})
	}
	var mu sync.Mutex
	audits := map[string]report.Audit{}
	sink := func(o auditor.Outcome) error {
		if o.Audit != nil {
			var a report.Audit
			require.NoError(t, json.Unmarshal(o.Audit, &a))
			mu.Lock()
			audits[a.Trace.TraceID] = a
			mu.Unlock()
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	engine := examplePolicy(t)
	entries, err := auditor.Submit(ctx, srv.JS, auditor.Config{Run: "test1", Policy: engine, Window: 4}, inputs, total+1, sink)
	require.NoError(t, err)
	require.Len(t, entries, 7)

	last := entries[6]
	assert.Equal(t, report.StatusRejected, last.Status)
	assert.Equal(t, "broken.json", last.Source)
	assert.Equal(t, []string{
		"agent_name: missing: agent_name is required",
		`steps[0].type: "teleport" is not one of llm_call, tool_call, decision, observation`,
	}, last.Problems)

	rules := func(id string) []string {
		var out []string
		for _, v := range audits[id].Violations {
			out = append(out, v.RuleID+"@"+v.StepID)
		}
		sort.Strings(out)
		return out
	}
	assert.Equal(t, []string{"external-call-after-pii@s4", "pii-exfiltration@s2"}, rules("support-bot-pii-exfil-001"))
	assert.Equal(t, []string{"action-after-injection@4", "external-communication@4", "prompt-injection@3"}, rules("inbox-assistant-injection-002"))
	assert.Equal(t, []string{"privilege-escalation@a3", "shell-as-root@a3"}, rules("devops-agent-escalation-003"))
	assert.Equal(t, []string{"missing-approval@b4"}, rules("billing-agent-approval-004"))
	assert.Equal(t, []string{"destructive-sql@q3", "raw-sql@q2", "raw-sql@q3"}, rules("analytics-agent-sql-005"))
	assert.Empty(t, rules("docs-helper-clean-006"))

	a := audits["support-bot-pii-exfil-001"]
	assert.Equal(t, engine.Hash(), a.PolicyHash)
	assert.Equal(t, 70, a.RiskScore)
	assert.Equal(t, "heuristic", a.ExplanationSource)
	assert.Contains(t, a.Explanations["s4"].Risks, "receives pii data from step s2")
	assert.Equal(t, []string{"s2"}, a.Explanations["s4"].FedBy)
	assert.Equal(t, map[string]int{"critical": 1, "high": 1, "medium": 0, "low": 0}, a.SeverityCounts)

	// Finished joins leave no half behind in the join bucket.
	join, err := srv.JS.KeyValue(ctx, reporter.JoinBucket)
	require.NoError(t, err)
	keys, err := join.ListKeys(ctx)
	require.NoError(t, err)
	var left []string
	for k := range keys.Keys() {
		left = append(left, k)
	}
	assert.Empty(t, left)
}

// TestMalformedMessagesAreDeadLettered publishes garbage on every stage's
// subject: each lands on troy.dlq.<stage> with a reason, and nothing is left
// pending or redelivered.
func TestMalformedMessagesAreDeadLettered(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	start(t, all(t, deps)...)
	dlq := subscribe(t, srv.NC, "troy.dlq.>")

	validGraph, _ := json.Marshal(events.Graphed{Trace: mustTrace(t)})
	cases := []struct {
		subject string
		stages  []string // every consumer of the subject dead-letters it
		reason  string
		data    []byte
		header  nats.Header
	}{
		{"troy.ingest.step", []string{"ingest"}, "no valid run token", []byte(`{}`), nil},
		{streamSubject(bus.StreamStep, "t1"), []string{"streamer"}, "trace t1: invalid trace", []byte(`{"step_id": 1}`), nil},
		{"troy.ingest.step.0.x", []string{"streamer"}, "belongs to partition", []byte(`{"step_id": "1"}`), nil},
		{"troy.trace.r1", []string{"graph"}, "malformed canonical trace", []byte(`not json`), nil},
		{"troy.trace.r1", []string{"graph"}, "carries no trace", []byte(`{"trace_id": "t"}`), nil},
		{"troy.graph.r1", []string{"evaluator", "explainer"}, "malformed", []byte(`[1,2]`), nil},
		{"troy.graph.r1", []string{"evaluator"}, "has no policy version sha256:0000", validGraph, nats.Header{bus.HeaderPolicy: {"sha256:0000"}}},
		{"troy.eval.r1", []string{"scorer"}, "without trace_id", []byte(`{}`), nil},
		{"troy.score.r1", []string{"reporter"}, "malformed", []byte(`{"trace_id": 5}`), nil},
		{"troy.explain.r1", []string{"reporter"}, "carries no trace", []byte(`{}`), nil},
		// a key that would widen the join's purge to other traces
		{"troy.score.r1", []string{"reporter"}, "not a pipeline key", []byte(`{"trace_id":"t","policy_hash":"sha256:ab"}`),
			nats.Header{bus.HeaderKey: {"*"}}},
	}
	for _, c := range cases {
		m := nats.NewMsg(c.subject)
		m.Data = c.data
		for k, v := range c.header {
			m.Header[k] = v
		}
		_, err := srv.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
		var stages []string
		for range c.stages {
			got := next(t, dlq)
			stages = append(stages, got.Header.Get(bus.HeaderStage))
			assert.Equal(t, bus.DeadLetterSubject(got.Header.Get(bus.HeaderStage), bus.RunOf(c.subject)), got.Subject)
			assert.Equal(t, c.subject, got.Header.Get(bus.HeaderOrigin))
			assert.Contains(t, got.Header.Get(bus.HeaderReason), c.reason, c.subject)
			assert.Equal(t, c.data, got.Data, "the dead letter keeps the original body")
		}
		assert.ElementsMatch(t, c.stages, stages, c.subject)
	}
	select {
	case extra := <-dlq:
		t.Fatalf("unexpected dead letter from %s: %s", extra.Header.Get(bus.HeaderStage), extra.Header.Get(bus.HeaderReason))
	case <-time.After(200 * time.Millisecond):
	}
	// Dead letters are terminated: every consumer ends with nothing pending.
	for _, name := range []string{"ingest", "graph", "evaluator", "scorer", "reporter"} {
		c, _ := deps.Topology.Consumer(name)
		require.Eventually(t, func() bool {
			info, err := srv.JS.Consumer(context.Background(), c.Stream, name)
			require.NoError(t, err)
			ci, err := info.Info(context.Background())
			require.NoError(t, err)
			return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.NumRedelivered == 0
		}, 10*time.Second, 20*time.Millisecond, name)
	}
}

// TestReporterJoinSurvivesRestart stops the reporter between the two halves
// of a trace: the half it stored in KV is still there when it comes back.
func TestReporterJoinSurvivesRestart(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	reports := subscribe(t, srv.NC, "troy.report.>")
	rp, err := reporter.New(context.Background(), deps, reporter.DefaultConfig())
	require.NoError(t, err)
	stop := start(t, rp)

	tr := mustTrace(t)
	key := bus.Key("r2", "a.json", tr.TraceID)
	h := nats.Header{bus.HeaderKey: {key}, bus.HeaderSource: {"a.json"}}
	sc, _ := json.Marshal(events.Scored{Evaluated: events.Evaluated{TraceID: tr.TraceID, PolicyID: "p", PolicyHash: "sha256:abc",
		Result: policy.Result{Violations: []policy.Violation{}, RuleErrors: []policy.RuleError{}}}})
	publish(t, srv.JS, "troy.score.r2", sc, h)
	require.Eventually(t, func() bool {
		kv, err := srv.JS.KeyValue(context.Background(), reporter.JoinBucket)
		require.NoError(t, err)
		_, err = kv.Get(context.Background(), key+".score")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "score half stored")
	stop()

	rp2, err := reporter.New(context.Background(), deps, reporter.DefaultConfig())
	require.NoError(t, err)
	start(t, rp2)
	ex, _ := json.Marshal(events.Explained{Trace: tr, Explanation: explain.Heuristic(tr, execgraph.Graph{})})
	publish(t, srv.JS, "troy.explain.r2", ex, h)

	got := next(t, reports)
	var rep events.Reported
	require.NoError(t, json.Unmarshal(got.Data, &rep))
	assert.Equal(t, tr.TraceID, rep.Audit.Trace.TraceID)
	assert.Equal(t, "sha256:abc", rep.Audit.PolicyHash)
	assert.Equal(t, "a.json", got.Header.Get(bus.HeaderSource))
	assert.Contains(t, rep.Markdown, "# Audit report: "+tr.TraceID)
}

func TestReporterWritesFilesWhenConfigured(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	dir := t.TempDir()
	cfg := reporter.DefaultConfig()
	cfg.Dir = dir
	cfg.Ledger = "reporter-test"
	rp, err := reporter.New(context.Background(), deps, cfg)
	require.NoError(t, err)
	start(t, rp)
	reports := subscribe(t, srv.NC, "troy.report.>")
	tr := mustTrace(t)
	h := nats.Header{bus.HeaderKey: {bus.Key("live", "", tr.TraceID)}}
	sc, _ := json.Marshal(events.Scored{Evaluated: events.Evaluated{TraceID: tr.TraceID, PolicyID: "p", PolicyHash: "sha256:abc"}})
	ex, _ := json.Marshal(events.Explained{Trace: tr, Explanation: explain.Heuristic(tr, execgraph.Graph{})})
	publish(t, srv.JS, "troy.explain.live", ex, h)
	publish(t, srv.JS, "troy.score.live", sc, h)
	next(t, reports)
	for _, f := range []string{report.MarkdownFile, report.JSONFile} {
		_, err := os.Stat(filepath.Join(dir, "live", tr.TraceID, f))
		assert.NoError(t, err)
	}

	// The audit is in the reporter's ledger, with the hash of audit.json.
	var entries [][]byte
	require.Eventually(t, func() bool {
		entries, err = ledger.Read(context.Background(), srv.JS, "reporter-test")
		return err == nil && len(entries) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, entries, 1, "one record for the one audit")
	rec, err := ledger.Decode(entries[0])
	require.NoError(t, err)
	assert.Equal(t, "audit", rec.Kind)
	assert.Equal(t, tr.TraceID, rec.Data["trace_id"])
	assert.Equal(t, "sha256:abc", rec.Data["policy_hash"])
	file, err := os.ReadFile(filepath.Join(dir, "live", tr.TraceID, report.JSONFile))
	require.NoError(t, err)
	digest, err := ledger.DigestJSON(file)
	require.NoError(t, err)
	assert.Equal(t, digest, rec.Data["audit_sha256"], "the record proves which audit.json was written")
}

// Both halves of each trace arrive at once, so two workers may each
// complete the join: the trace is still recorded once.
func TestReporterRecordsEachAuditOnce(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	cfg := reporter.DefaultConfig()
	cfg.Ledger = "reporter-once"
	rp, err := reporter.New(context.Background(), deps, cfg)
	require.NoError(t, err)
	start(t, rp)
	reports := subscribe(t, srv.NC, "troy.report.>")
	const n = 40
	for i := range n {
		tr, err := parseTrace([]byte(fmt.Sprintf(`{"trace_id":"once-%d","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`, i)))
		require.NoError(t, err)
		h := nats.Header{bus.HeaderKey: {bus.Key("live", "", tr.TraceID)}}
		sc, _ := json.Marshal(events.Scored{Evaluated: events.Evaluated{TraceID: tr.TraceID, PolicyID: "p", PolicyHash: "sha256:abc"}})
		ex, _ := json.Marshal(events.Explained{Trace: tr, Explanation: explain.Heuristic(tr, execgraph.Graph{})})
		publish(t, srv.JS, "troy.score.live", sc, h)
		publish(t, srv.JS, "troy.explain.live", ex, h)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		var rep events.Reported
		require.NoError(t, json.Unmarshal(next(t, reports).Data, &rep))
		seen[rep.Audit.Trace.TraceID] = true
	}
	var entries [][]byte
	require.Eventually(t, func() bool {
		entries, err = ledger.Read(context.Background(), srv.JS, "reporter-once")
		return err == nil && len(entries) >= n
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // a second record would be there by now
	entries, err = ledger.Read(context.Background(), srv.JS, "reporter-once")
	require.NoError(t, err)
	traces := map[any]int{}
	for _, e := range entries {
		r, err := ledger.Decode(e)
		require.NoError(t, err)
		traces[r.Data["trace_id"]]++
	}
	assert.Len(t, traces, n)
	assert.Len(t, entries, n, "each audit recorded once")
}

func mustTrace(t *testing.T) *traceT {
	t.Helper()
	tr, err := parseTrace([]byte(`{"trace_id":"join-1","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`))
	require.NoError(t, err)
	return tr
}

func publish(t *testing.T, js jetstream.JetStream, subject string, data []byte, h nats.Header) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	for k, v := range h {
		m.Header[k] = v
	}
	_, err := js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, ch)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return ch
}

func next(t *testing.T, ch chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no message within 15s")
		return nil
	}
}

// TestDeadLetteredInputEndsAsRejected runs a graph stage that gives up on
// one trace: the submitter reports that input as rejected, with the stage's
// reason, instead of waiting for a report that will never come.
func TestDeadLetteredInputEndsAsRejected(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	rs := all(t, deps)
	rs[1] = poisonGraph{deps: deps}
	start(t, rs...)

	inputs := func(yield func(auditor.Input) bool) {
		_ = yield(auditor.Input{Source: "ok.json", Data: []byte(`{"trace_id":"fine","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`)}) &&
			yield(auditor.Input{Source: "poison.json", Data: []byte(`{"trace_id":"poison","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entries, err := auditor.Submit(ctx, srv.JS, auditor.Config{Run: "dl1", Policy: examplePolicy(t), Window: 4, IdleTimeout: 30 * time.Second}, inputs, 2, nil)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, report.StatusAudited, entries[0].Status)
	assert.Equal(t, report.StatusRejected, entries[1].Status)
	require.Len(t, entries[1].Problems, 1)
	assert.Contains(t, entries[1].Problems[0], "the graph stage gave up on it: cannot graph poison")
}

// poisonGraph is the graph stage with a handler that refuses one trace; the
// rest goes through the real service code path.
type poisonGraph struct{ deps bus.Deps }

func (p poisonGraph) Run(ctx context.Context) error {
	svc, err := graph.New(p.deps, graph.DefaultConfig())
	if err != nil {
		return err
	}
	return bus.RunRouterStage(ctx, p.deps, graph.Consumer, 2, func(m *message.Message) ([]*message.Message, error) {
		if strings.Contains(string(m.Payload), `"poison"`) {
			return nil, bus.Permanentf("cannot graph poison")
		}
		return svc.Handle(m)
	})
}

// TestEvaluatorPicksUpAPushedPolicy: traces that name no policy use the
// evaluator's default by id; pushing a new version of that id switches the
// evaluator to it without a restart.
func TestEvaluatorPicksUpAPushedPolicy(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	v1, err := policy.Parse([]byte("policy_id: live\nrules:\n  - rule_id: r1\n    condition: 'true'\n"))
	require.NoError(t, err)
	_, err = store.Push(context.Background(), v1)
	require.NoError(t, err)
	cfg := evaluator.DefaultConfig()
	cfg.DefaultPolicy = "live"
	ev, err := evaluator.New(context.Background(), deps, cfg)
	require.NoError(t, err)
	start(t, ev)
	evals := subscribe(t, srv.NC, "troy.eval.>")

	g, _ := json.Marshal(events.Graphed{Trace: mustTrace(t)})
	publish(t, srv.JS, "troy.graph.live", g, nats.Header{bus.HeaderKey: {"k1"}})
	var got events.Evaluated
	require.NoError(t, json.Unmarshal(next(t, evals).Data, &got))
	assert.Equal(t, v1.Hash(), got.PolicyHash)

	v2, err := policy.Parse([]byte("policy_id: live\nrules:\n  - rule_id: r2\n    condition: 'true'\n"))
	require.NoError(t, err)
	_, err = store.Push(context.Background(), v2)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		publish(t, srv.JS, "troy.graph.live", g, nats.Header{bus.HeaderKey: {fmt.Sprint(time.Now().UnixNano())}})
		require.NoError(t, json.Unmarshal(next(t, evals).Data, &got))
		return got.PolicyHash == v2.Hash()
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, "r2", got.Violations[0].RuleID)
}

// TestViolationsBecomeFindingsOnce: each violation is one OCSF finding on
// troy.violations.<severity>.<rule>, and a redelivered trace adds none.
func TestViolationsBecomeFindingsOnce(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	ev, err := evaluator.New(context.Background(), deps, evaluator.DefaultConfig())
	require.NoError(t, err)
	start(t, ev)
	engine := examplePolicy(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	_, err = store.Put(context.Background(), engine.Policy())
	require.NoError(t, err)
	evals := subscribe(t, srv.NC, "troy.eval.>")

	raw, err := os.ReadFile("../examples/traces/support_bot.json")
	require.NoError(t, err)
	tr, err := parseTrace(raw)
	require.NoError(t, err)
	g, _ := json.Marshal(events.Graphed{Trace: tr, Graph: execgraph.Build(tr)})
	h := nats.Header{bus.HeaderKey: {"sb"}, bus.HeaderPolicy: {engine.Hash()}}
	publish(t, srv.JS, "troy.graph.r9", g, h)
	next(t, evals)
	publish(t, srv.JS, "troy.graph.r9", g, h) // a redelivery, as after a crash
	next(t, evals)

	vs, err := srv.JS.Stream(context.Background(), pipelines.StreamViolations)
	require.NoError(t, err)
	info, err := vs.Info(context.Background(), jetstream.WithSubjectFilter("troy.violations.>"))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.State.Msgs, "two violations, two findings, no duplicates")
	assert.Equal(t, map[string]uint64{
		"troy.violations.critical.pii-exfiltration":    1,
		"troy.violations.high.external-call-after-pii": 1,
	}, info.State.Subjects)
	m, err := vs.GetLastMsgForSubject(context.Background(), "troy.violations.critical.pii-exfiltration")
	require.NoError(t, err)
	var f map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &f))
	assert.Equal(t, float64(2004), f["class_uid"])
	assert.Equal(t, m.Header.Get(bus.HeaderMsgID), f["finding_info"].(map[string]any)["uid"])
}

func TestATraceMayNameItsPolicy(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	named, err := policy.Parse([]byte("policy_id: named\nrules:\n  - rule_id: from-metadata\n    condition: 'true'\n"))
	require.NoError(t, err)
	_, err = store.Push(context.Background(), named)
	require.NoError(t, err)
	ev, err := evaluator.New(context.Background(), deps, evaluator.DefaultConfig())
	require.NoError(t, err)
	start(t, ev)
	evals := subscribe(t, srv.NC, "troy.eval.>")
	tr := mustTrace(t)
	tr.Metadata = map[string]any{"policy_id": "named"}
	g, _ := json.Marshal(events.Graphed{Trace: tr})
	publish(t, srv.JS, "troy.graph.live", g, nats.Header{bus.HeaderKey: {"pm"}})
	var got events.Evaluated
	require.NoError(t, json.Unmarshal(next(t, evals).Data, &got))
	assert.Equal(t, named.Hash(), got.PolicyHash)
}

// Rejected documents without a source or an id each get their own
// rejection record (issue 8: they shared one message id and JetStream kept
// only the first).
func TestIdlessRejectionsAreKeptApart(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	in, err := ingest.New(deps, ingest.DefaultConfig())
	require.NoError(t, err)
	start(t, in)
	ctx := context.Background()
	for _, doc := range []string{`{"agent_name": "a"}`, `not json`, `{"steps": []}`} {
		_, err := srv.JS.Publish(ctx, "troy.ingest.idless", []byte(doc))
		require.NoError(t, err)
	}
	s, err := srv.JS.Stream(ctx, auditor.OutcomesStream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("troy.rejected.idless"))
		return err == nil && info.State.Subjects["troy.rejected.idless"] == 3
	}, 15*time.Second, 20*time.Millisecond, "three rejections stored")
}
