package guard_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/httpapi"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/guardserver"
)

const policyYAML = `
policy_id: guard-test
rules:
  - rule_id: no-external-after-pii
    condition: >
      step.type == 'tool_call' and get(step, 'metadata.network_zone') == 'external' and
      any_prev({ get(#, 'metadata.data_classification') == 'pii' })
    severity: critical
  - rule_id: no-rm-rf
    condition: step.name == 'bash' and matches(get(step, 'input.cmd', ''), 'rm +-rf')
    severity: high
`

func engine(t *testing.T, src string) *policy.Engine {
	t.Helper()
	p, err := policy.Parse([]byte(src))
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)
	return e
}

var (
	readPII  = guard.Action{Name: "crm_lookup", Metadata: map[string]any{"data_classification": "pii"}}
	postOut  = guard.Action{Name: "http_post", Metadata: map[string]any{"network_zone": "external"}}
	rmRF     = guard.Action{Name: "bash", Input: map[string]any{"cmd": "rm -rf /"}}
	listDocs = guard.Action{Name: "docs_search"}
)

func TestLocalDecides(t *testing.T) {
	ctx := context.Background()
	g := &guard.Local{Policies: guard.Static{E: engine(t, policyYAML)}}

	d, err := g.Check(ctx, guard.Request{Action: listDocs})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision)
	assert.Empty(t, d.Violations)
	assert.Equal(t, "guard-test", d.PolicyID)
	assert.Contains(t, d.PolicyHash, "sha256:")

	d, err = g.Check(ctx, guard.Request{Action: rmRF})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision)
	require.Len(t, d.Violations, 1)
	assert.Equal(t, "no-rm-rf", d.Violations[0].RuleID)

	d, err = g.Check(ctx, guard.Request{Action: rmRF, Mode: guard.Monitor})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision, "monitor mode allows")
	assert.Len(t, d.Violations, 1, "and still reports")

	history := []*trace.Step{{StepID: "1", Type: "tool_call", Name: "crm_lookup", Metadata: map[string]any{"data_classification": "pii"}}}
	d, err = g.Check(ctx, guard.Request{Action: postOut, History: history})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision, "any_prev sees the history")
	d, err = g.Check(ctx, guard.Request{Action: postOut})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision)
}

func TestRequestsThatCannotBeChecked(t *testing.T) {
	g := &guard.Local{Policies: guard.Static{E: engine(t, policyYAML)}}
	for name, req := range map[string]guard.Request{
		"no tool name": {Action: guard.Action{Type: "tool_call"}},
		"bad type":     {Action: guard.Action{Type: "teleport", Name: "x"}},
		"bad mode":     {Action: listDocs, Mode: "audit"},
		"bad history":  {Action: listDocs, History: []*trace.Step{{Type: "llm_call"}}},
	} {
		_, err := g.Check(context.Background(), req)
		assert.ErrorIs(t, err, guard.ErrBadRequest, name)
	}
}

// startGuard runs the guard service on a real server, with the policy pushed.
func startGuard(t *testing.T) (*bustest.Server, *policystore.Store) {
	t.Helper()
	srv, deps := bustest.Provisioned(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	_, err = store.Push(context.Background(), engine(t, policyYAML).Policy())
	require.NoError(t, err)
	svc, err := guardserver.New(context.Background(), srv.NC, deps, prometheus.NewRegistry(), guardserver.Config{DefaultPolicy: "guard-test"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	// answering once means subscribed
	require.Eventually(t, func() bool {
		d, err := (&guard.NATS{Conn: srv.NC, Opts: guard.RemoteOptions{Timeout: 200 * time.Millisecond}}).Check(context.Background(), guard.Request{Action: listDocs})
		return err == nil && d.Reason == ""
	}, 10*time.Second, 20*time.Millisecond)
	return srv, store
}

// The three transports give the same decisions, and sessions carry history
// between checks so any_prev works live.
func TestTransportsAndSessions(t *testing.T) {
	srv, store := startGuard(t)
	sessions, err := guard.OpenSessions(context.Background(), srv.JS)
	require.NoError(t, err)
	store.SetDefault("guard-test")
	local := &guard.Local{Policies: store, Sessions: sessions}
	web := httptest.NewServer(httpapi.Guard(local))
	defer web.Close()

	transports := map[string]guard.Guard{
		"in-process": local,
		"nats":       &guard.NATS{Conn: srv.NC},
		"http":       &guard.HTTP{URL: web.URL},
	}
	for name, g := range transports {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			session := "s-" + name
			d, err := g.Check(ctx, guard.Request{SessionID: session, Action: readPII})
			require.NoError(t, err)
			assert.Equal(t, guard.Allow, d.Decision)
			d, err = g.Check(ctx, guard.Request{SessionID: session, Action: postOut})
			require.NoError(t, err)
			assert.Equal(t, guard.Block, d.Decision, "the session remembers the PII read")
			assert.Equal(t, session, d.SessionID)
			require.Len(t, d.Violations, 1)
			assert.Equal(t, "no-external-after-pii", d.Violations[0].RuleID)

			d, err = g.Check(ctx, guard.Request{SessionID: "other-" + name, Action: postOut})
			require.NoError(t, err)
			assert.Equal(t, guard.Allow, d.Decision, "sessions are separate")

			_, err = g.Check(ctx, guard.Request{Policy: "no-such-policy", Action: listDocs})
			assert.ErrorContains(t, err, `no policy with id "no-such-policy"`)
		})
	}
	hist, err := sessions.History(context.Background(), "s-nats")
	require.NoError(t, err)
	require.Len(t, hist, 1, "only the allowed action is recorded")
	assert.Equal(t, "crm_lookup", hist[0].Name)
}

// A session whose stored history is damaged is refused with a way out, not
// checked against an empty history; appending to it leaves it as it is.
func TestDamagedSessionHistory(t *testing.T) {
	srv, store := startGuard(t)
	ctx := context.Background()
	sessions, err := guard.OpenSessions(ctx, srv.JS)
	require.NoError(t, err)
	store.SetDefault("guard-test")
	kv, err := srv.JS.KeyValue(ctx, guard.SessionBucket)
	require.NoError(t, err)
	key := base64.RawURLEncoding.EncodeToString([]byte("s-1"))
	_, err = kv.Put(ctx, key, []byte("{not json"))
	require.NoError(t, err)

	local := &guard.Local{Policies: store, Sessions: sessions}
	_, err = local.Check(ctx, guard.Request{SessionID: "s-1", Action: listDocs})
	assert.ErrorContains(t, err, "session s-1: stored history is not valid (delete its key from bucket troy_sessions")
	err = sessions.Append(ctx, "s-1", &trace.Step{StepID: "x", Type: trace.TypeToolCall, Name: "ls"})
	assert.ErrorContains(t, err, "stored history is not valid")
	e, err := kv.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "{not json", string(e.Value()))
}

func TestRemoteFailsClosed(t *testing.T) {
	srv := bustest.RunServer(t) // no guard subscribed
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + lis.Addr().String()
	lis.Close()

	for name, g := range map[string]guard.Guard{
		"nats": &guard.NATS{Conn: srv.NC, Opts: guard.RemoteOptions{Timeout: 300 * time.Millisecond}},
		"http": &guard.HTTP{URL: deadURL, Opts: guard.RemoteOptions{Timeout: 300 * time.Millisecond}},
	} {
		d, err := g.Check(context.Background(), guard.Request{Action: listDocs})
		require.NoError(t, err, name)
		assert.Equal(t, guard.Block, d.Decision, name)
		assert.Contains(t, d.Reason, "guard unreachable, failing closed", name)
	}
	open := &guard.NATS{Conn: srv.NC, Opts: guard.RemoteOptions{Timeout: 300 * time.Millisecond, FailOpen: true}}
	d, err := open.Check(context.Background(), guard.Request{Action: listDocs})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision)
	assert.Contains(t, d.Reason, "failing open")
}

// A pushed version of the policy is used from the next check on.
func TestHotReload(t *testing.T) {
	srv, store := startGuard(t)
	g := &guard.NATS{Conn: srv.NC}
	d, err := g.Check(context.Background(), guard.Request{Action: guard.Action{Name: "deploy"}})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision)
	before := d.PolicyHash

	v2 := engine(t, policyYAML+`
  - rule_id: no-deploys
    condition: step.name == 'deploy'
`)
	_, err = store.Push(context.Background(), v2.Policy())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err = g.Check(context.Background(), guard.Request{Action: guard.Action{Name: "deploy"}})
		return err == nil && d.Decision == guard.Block
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, v2.Hash(), d.PolicyHash)
	assert.NotEqual(t, before, d.PolicyHash)
}

// A guard that cannot decide blocks (issue 8): a rule that errors on the
// action, or is stopped by its budget, blocks in enforce mode unless the
// rule or policy says on_error: allow.
func TestRuleErrorsBlockInEnforceMode(t *testing.T) {
	ctx := context.Background()
	const src = `
policy_id: amounts
rules:
  - rule_id: big-payment
    condition: step.name == 'pay' and step.input.amount > 1000
    severity: high
`
	g := &guard.Local{Policies: guard.Static{E: engine(t, src)}}
	pay := guard.Action{Name: "pay", Input: map[string]any{"amount": "5000"}}
	d, err := g.Check(ctx, guard.Request{Action: pay})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision, "a rule that cannot be evaluated blocks")
	assert.Contains(t, d.Reason, "rule big-payment could not be evaluated, failing closed")
	require.Len(t, d.RuleErrors, 1)

	d, err = g.Check(ctx, guard.Request{Action: pay, Mode: guard.Monitor})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision, "monitor mode still allows")

	for name, s := range map[string]string{
		"rule":   strings.Replace(src, "severity: high", "severity: high\n    on_error: allow", 1),
		"policy": strings.Replace(src, "rules:", "on_error: allow\nrules:", 1),
	} {
		g := &guard.Local{Policies: guard.Static{E: engine(t, s)}}
		d, err := g.Check(ctx, guard.Request{Action: pay})
		require.NoError(t, err)
		assert.Equal(t, guard.Allow, d.Decision, "on_error: allow on the %s", name)
		assert.Len(t, d.RuleErrors, 1, "and the error is still reported")
	}

	p, err := policy.Parse([]byte(`
policy_id: slow
rules:
  - rule_id: quadratic
    condition: "any_prev({ matches(text(#), 'x.*y.*z.*never') })"
`))
	require.NoError(t, err)
	e, err := policy.CompileWith(p, policy.Options{Budget: time.Nanosecond})
	require.NoError(t, err)
	history := make([]*trace.Step, 3000)
	for i := range history {
		history[i] = &trace.Step{StepID: fmt.Sprint(i), Type: trace.TypeToolCall, Name: "ls"}
	}
	d, err = (&guard.Local{Policies: guard.Static{E: e}}).Check(ctx, guard.Request{Action: listDocs, History: history})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision, "a rule stopped by its budget blocks")
	assert.Contains(t, d.Reason, "over the 1ns budget")
}

// Every error path of the remote guards gives a decision (issue 8): an
// unknown policy, a 404, a proxy's 403 page, a 200 without a decision. A
// caller that only reads d.Decision never runs what was not allowed.
func TestRemoteErrorsNeverAllow(t *testing.T) {
	srv, store := startGuard(t)
	store.SetDefault("guard-test")
	ctx := context.Background()

	n := &guard.NATS{Conn: srv.NC}
	d, err := n.Check(ctx, guard.Request{Policy: "no-such-policy", Action: listDocs})
	assert.ErrorContains(t, err, `no policy with id "no-such-policy"`)
	assert.Equal(t, guard.Block, d.Decision, "nats: unknown policy")
	d, err = n.Check(ctx, guard.Request{Action: guard.Action{Type: "teleport"}})
	assert.ErrorIs(t, err, guard.ErrBadRequest)
	assert.Equal(t, guard.Block, d.Decision, "nats: bad request")

	local := &guard.Local{Policies: store}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/guard/check", httpapi.Guard(local))
	mux.HandleFunc("POST /proxy/v1/guard/check", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "<html><body>Access denied</body></html>")
	})
	mux.HandleFunc("POST /empty/v1/guard/check", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "{}") })
	mux.HandleFunc("POST /html200/v1/guard/check", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "<html>login</html>") })
	web := httptest.NewServer(mux)
	defer web.Close()

	d, err = (&guard.HTTP{URL: web.URL}).Check(ctx, guard.Request{Policy: "no-such-policy", Action: listDocs})
	assert.ErrorContains(t, err, `no policy with id "no-such-policy"`)
	assert.Equal(t, guard.Block, d.Decision, "http: unknown policy")
	for path, want := range map[string]string{
		"/nowhere": "404 Not Found",
		"/proxy":   "403 Forbidden",
		"/empty":   "the reply has no decision",
		"/html200": "the reply is not a guard decision",
	} {
		d, err := (&guard.HTTP{URL: web.URL + path}).Check(ctx, guard.Request{Action: listDocs})
		require.NoError(t, err, path)
		assert.Equal(t, guard.Block, d.Decision, path)
		assert.Contains(t, d.Reason, "failing closed", path)
		assert.Contains(t, d.Reason, want, path)

		d, err = (&guard.HTTP{URL: web.URL + path, Opts: guard.RemoteOptions{FailOpen: true}}).Check(ctx, guard.Request{Action: listDocs})
		require.NoError(t, err, path)
		assert.Equal(t, guard.Allow, d.Decision, "FailOpen allows when no guard answered: %s", path)
	}
}

type brokenSessions struct{}

func (brokenSessions) History(context.Context, string) ([]*trace.Step, error) { return nil, nil }
func (brokenSessions) Append(context.Context, string, *trace.Step) error {
	return fmt.Errorf("nats: maximum payload exceeded")
}

// A guard that answers "I failed closed" is a guard that answered: a FailOpen
// client still blocks (it allowed before, reading the 503 as unreachable).
// Found by probing: an action too large to record in the session.
func TestFailedClosedAnswersAreNotUnreachable(t *testing.T) {
	local := &guard.Local{Policies: guard.Static{E: engine(t, policyYAML)}, Sessions: brokenSessions{}}
	web := httptest.NewServer(httpapi.Guard(local))
	defer web.Close()
	c := &guard.HTTP{URL: web.URL, Opts: guard.RemoteOptions{FailOpen: true}}
	d, err := c.Check(context.Background(), guard.Request{SessionID: "s", Action: listDocs})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision)
	assert.Contains(t, d.Reason, "record the allowed action")
}

// Probing found that a 5,000-byte session id, put into a KV subject, made
// the server close troy's NATS connection for good. Ids are bounded.
func TestSessionIDsAreBounded(t *testing.T) {
	srv, store := startGuard(t)
	store.SetDefault("guard-test")
	n := &guard.NATS{Conn: srv.NC}
	d, err := n.Check(context.Background(), guard.Request{SessionID: strings.Repeat("S", 5000), Action: listDocs})
	assert.ErrorIs(t, err, guard.ErrBadRequest)
	assert.ErrorContains(t, err, "session_id is 5000 bytes, over the 255-byte limit")
	assert.Equal(t, guard.Block, d.Decision)
	d, err = n.Check(context.Background(), guard.Request{SessionID: "after", Action: listDocs})
	require.NoError(t, err, "the guard still answers")
	assert.Equal(t, guard.Allow, d.Decision)
	assert.True(t, srv.NC.IsConnected())
}

// Rule errors are capped per rule: 100 failing on_error: allow rules do not
// push out the one error that must block (it allowed before).
func TestManyRuleErrorsDoNotHideABlockingOne(t *testing.T) {
	var b strings.Builder
	b.WriteString("policy_id: cap\nrules:\n")
	for i := range 101 {
		fmt.Fprintf(&b, "  - rule_id: noisy-%d\n    condition: step.input.n + 1 > 0\n    on_error: allow\n", i)
	}
	b.WriteString("  - rule_id: big-payment\n    condition: step.name == 'pay' and step.input.amount > 1000\n")
	g := &guard.Local{Policies: guard.Static{E: engine(t, b.String())}}
	d, err := g.Check(context.Background(), guard.Request{Action: guard.Action{Name: "pay", Input: map[string]any{"amount": "5000"}}})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision)
	assert.Contains(t, d.Reason, "rule big-payment could not be evaluated")
}

// Found in review: a check had no deadline, so a slow one was answered after
// the client gave up and a FailOpen client allowed. The service now cuts a
// check short below the client's timeout and blocks.
func TestSlowChecksBlockBeforeTheClientGivesUp(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	store, err := policystore.Open(context.Background(), srv.JS)
	require.NoError(t, err)
	_, err = store.Push(context.Background(), engine(t, `
policy_id: slow
rules:
  - rule_id: slow
    condition: "any_prev({ any(1..5000, {text(#) matches 'a+b'}) })"
`).Policy())
	require.NoError(t, err)
	svc, err := guardserver.New(context.Background(), srv.NC, deps, prometheus.NewRegistry(),
		guardserver.Config{DefaultPolicy: "slow", CheckTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })

	history := make([]*trace.Step, 2000)
	for i := range history {
		history[i] = &trace.Step{StepID: fmt.Sprint(i), Type: trace.TypeToolCall, Name: "ls", Output: "aaaa"}
	}
	c := &guard.NATS{Conn: srv.NC, Opts: guard.RemoteOptions{FailOpen: true, Timeout: 5 * time.Second}}
	require.Eventually(t, func() bool {
		d, err := c.Check(context.Background(), guard.Request{Action: listDocs, History: history})
		require.NoError(t, err)
		return !strings.Contains(d.Reason, "unreachable") // subscribed
	}, 10*time.Second, 50*time.Millisecond)
	start := time.Now()
	d, err := c.Check(context.Background(), guard.Request{Action: listDocs, History: history})
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision, "%+v", d)
	assert.Contains(t, d.Reason, "could not be evaluated")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// A session's history is its last MaxSessionSteps steps, however long it ran.
func TestMemSessionsKeepTheLastSteps(t *testing.T) {
	s := guard.NewMemSessions()
	ctx := context.Background()
	for i := range 3*guard.MaxSessionSteps + 7 {
		require.NoError(t, s.Append(ctx, "s", &trace.Step{StepID: strconv.Itoa(i)}))
	}
	h, err := s.History(ctx, "s")
	require.NoError(t, err)
	require.Len(t, h, guard.MaxSessionSteps)
	assert.Equal(t, strconv.Itoa(2*guard.MaxSessionSteps+7), h[0].StepID)
	assert.Equal(t, strconv.Itoa(3*guard.MaxSessionSteps+6), h[len(h)-1].StepID)
}
