package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// natsWithUsers runs nats-server with the users troy nats-config wrote and
// returns a URL maker: url("evaluator") is that user's nats://user:pw@….
func natsWithUsers(t *testing.T, dir string) (url func(user string) string, anon string) {
	t.Helper()
	r := troy(t, dir, "nats-config", "--out", "nats")
	require.Equal(t, 0, r.code, r.stderr)
	conf := filepath.Join(dir, "nats", "server.conf")
	require.NoError(t, os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\nmax_payload: 16MB\njetstream { store_dir: \""+filepath.Join(dir, "js")+"\" }\ninclude ./auth.conf\n"), 0o600))
	srv := bustest.RunConfig(t, conf)
	creds, err := os.ReadFile(filepath.Join(dir, "nats", "credentials"))
	require.NoError(t, err)
	pw := map[string]string{}
	for _, l := range strings.Split(string(creds), "\n") {
		if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
			pw[f[0]] = f[1]
		}
	}
	host := strings.TrimPrefix(srv.ClientURL(), "nats://")
	return func(user string) string {
		require.Contains(t, pw, user)
		return fmt.Sprintf("nats://%s:%s@%s", user, pw[user], host)
	}, srv.ClientURL()
}

// refused publishes as the user url names and reports whether the
// server refused it.
func refused(t *testing.T, url, subject string) bool {
	t.Helper()
	return bustest.Refused(t, subject, url)
}

// Every service under its own NATS user (troy nats-config), provisioned by
// the operator: an audit runs end to end, the guard answers, and each user
// is refused what is not its own — the attacks an anonymous client could
// make before.
func TestServicesUnderTheirOwnNATSUsers(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	url, anon := natsWithUsers(t, dir)

	_, err := nats.Connect(anon)
	require.Error(t, err, "no anonymous client")
	r := troy(t, dir, "provision", "--nats-url", url("operator"), "--policy", policy)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "pushed "+policy+" as the latest version of")
	r = troy(t, dir, "ledger", "keygen", "--name", "nats-e2e", "-o", "ledger.key")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger.pub"), []byte(r.stdout), 0o644))
	httpOf := map[string]string{}
	for _, target := range []string{"ingest", "graph", "evaluator", "explainer", "scorer", "reporter", "guard", "streamer", "checkpointer", "agent-runner"} {
		extra := []string{"--no-provision"}
		switch target {
		case "ingest", "evaluator", "guard", "streamer": // the services that default to serve's --policy (the operator pushed it)
			extra = append(extra, "--policy", policy)
		case "checkpointer":
			extra = append(extra, "--ledger-key", "ledger.key", "--checkpoint-interval", "100ms")
		}
		_, httpOf[target] = serveTarget(t, dir, url(target), target, extra...)
	}
	for target, h := range httpOf {
		_, code := get(t, h+"/readyz")
		assert.Equal(t, 200, code, "%s is ready under its own user", target)
	}
	r = troy(t, dir, "audit-batch", traces, policy, "--out-dir", "out", "--nats-url", url("audit"), "--no-provision", "--timeout", "60s")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "could not purge", "clients purge nothing: the stream's max age does it, and that is no error")
	reports, err := filepath.Glob(filepath.Join(dir, "out", "*", "audit.json"))
	require.NoError(t, err)
	assert.Len(t, reports, 6, "every example trace audited by services under their own users")

	r = troy(t, dir, "check", policy, "-a", "docs_search", "--nats-url", url("guard-client"))
	assert.Equal(t, 0, r.code, r.stdout+r.stderr)

	// A live trace streamed to ingest's HTTP API, audited by the streamer;
	// its finding read by the SIEM user.
	for _, body := range []string{
		`{"step_id": "1", "type": "tool_call", "name": "crm", "metadata": {"data_classification": "pii"}}`,
		`{"step_id": "2", "type": "tool_call", "name": "http_post", "metadata": {"network_zone": "external"}}`,
	} {
		resp, err := http.Post(httpOf["ingest"]+"/v1/traces/live-1/steps?agent=bot", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	r = troy(t, dir, "violations", "tail", "--nats-url", url("siem"), "--since", "1h", "--rule", "external-call-after-pii", "--limit", "2", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "live-1", "the streamed trace's finding")

	// Every ledger (the reporter's, the guard's) verifies against the
	// checkpointer's checkpoints, read by the operator.
	require.Eventually(t, func() bool {
		r = troy(t, dir, "ledger", "verify", "--all", "--pubkey", "ledger.pub", "--nats-url", url("operator"), "--no-provision")
		return r.code == 0 && strings.Contains(r.stdout, "log: ok")
	}, 20*time.Second, 200*time.Millisecond, "%s %s", r.stdout, r.stderr)

	// what an anonymous client could do before, each refused now
	r = troy(t, dir, "policies", "push", policy, "--nats-url", url("audit"), "--no-provision")
	assert.NotEqual(t, 0, r.code, "an audit client cannot replace a policy")
	assert.Contains(t, strings.ToLower(r.stderr), "permissions violation", r.stderr)
	assert.Contains(t, r.stderr, "this NATS user may not write policies; an operator pushes them")
	weak := filepath.Join(dir, "weak.yaml")
	require.NoError(t, os.WriteFile(weak, []byte("policy_id: troy-examples\nrules:\n  - rule_id: nothing\n    description: never fires\n    severity: low\n    condition: \"false\"\n"), 0o644))
	r = troy(t, dir, "serve", "--target", "evaluator", "--policy", weak, "--nats-url", url("evaluator"), "--no-provision", "--http-addr", "127.0.0.1:0")
	assert.NotEqual(t, 0, r.code, "a service cannot repoint a policy id either")
	assert.Contains(t, r.stderr, "an operator pushes it first", r.stderr)
	r = troy(t, dir, "audit-batch", traces, weak, "--out-dir", "weak", "--nats-url", url("audit"), "--no-provision", "--timeout", "20s")
	assert.NotEqual(t, 0, r.code, "nor can an audit client bring its own version")
	assert.Contains(t, r.stderr, "an operator pushes it first", r.stderr)
	assert.True(t, refused(t, url("audit"), "troy.graph.live"), "nor publish past ingest's validation")
	assert.True(t, refused(t, url("audit"), "$JS.API.STREAM.PURGE.TROY_DLQ"), "nor purge the dead letters")
	// each service's user is refused another service's subject
	for user, foreign := range map[string]string{
		"ingest": "troy.graph.live", "graph": "troy.eval.live", "evaluator": "troy.report.live", "explainer": "troy.score.live",
		"scorer": "troy.report.live", "reporter": "troy.violations.critical.x", "streamer": "troy.report.live",
		"guard": "troy.ingest.live", "checkpointer": "troy.ledger.guard.x", "agent-runner": "troy.ledger.guard.x",
		"splunk": "troy.violations.critical.x", "syslog": "troy.ingest.live", "guard-client": "troy.ingest.live",
	} {
		assert.True(t, refused(t, url(user), foreign), "%s may not publish %s", user, foreign)
	}
	assert.True(t, refused(t, url("siem"), "troy.ingest.live"), "a SIEM only reads")
	assert.True(t, refused(t, url("guard"), "$JS.API.STREAM.DELETE.LEDGER"), "nobody but the operator rewrites the ledger")
	assert.False(t, refused(t, url("ingest"), "troy.trace.live"), "and each may do its own work")
}

// The embedded server of troy serve takes the same users: outside clients
// log in, its own services need nothing; open to the network without
// users, it refuses to start.
func TestEmbeddedNATSWithUsers(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "serve", "--nats-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "open"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "the embedded NATS server has no users")

	r = troy(t, dir, "nats-config", "--out", "nats")
	require.Equal(t, 0, r.code, r.stderr)
	before := read(t, dir, "nats/credentials")
	r = troy(t, dir, "nats-config", "--out", "nats")
	assert.Equal(t, 1, r.code, "a second run would lock out the first one's users")
	assert.Contains(t, r.stderr, "auth.conf exists: new passwords would lock out whoever uses the old ones; --force")
	assert.Equal(t, before, read(t, dir, "nats/credentials"))
	creds, err := os.ReadFile(filepath.Join(dir, "nats", "credentials"))
	require.NoError(t, err)
	var auditPW string
	for _, l := range strings.Split(string(creds), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "audit" {
			auditPW = f[1]
		}
	}
	natsURL, _ := startServe(t, dir, "--nats-auth", filepath.Join("nats", "auth.conf"))
	_, err = nats.Connect(natsURL)
	require.Error(t, err, "no anonymous client")
	host := strings.TrimPrefix(natsURL, "nats://")
	r = troy(t, dir, "audit-batch", traces, policy, "--out-dir", "out", "--nats-url", "nats://audit:"+auditPW+"@"+host, "--no-provision", "--timeout", "60s")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, auditPW, "no password in what troy prints")
}
