// Package deploy holds the deployment files; its tests run them.
package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/natsauth"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
)

// A NATS server run with deploy/nats/auth.conf: troy's services append to
// the ledger under their own users and cannot delete, purge or reconfigure
// it, nor delete a record, nor answer the JetStream API; the operator
// provisions and may reconfigure.
func TestServicesCannotRewriteTheLedger(t *testing.T) {
	srv, topo, connect := authServer(t)
	_, err := nats.Connect(srv.ClientURL())
	require.Error(t, err, "no anonymous access")

	ctx := context.Background()
	operator := connect("operator", "operator-secret")
	require.NoError(t, bus.Provision(ctx, operator, topo), "the operator provisions")
	svc := connect("agent-runner", "agent-runner-secret")
	require.NoError(t, bus.CheckTopology(ctx, svc, topo), "a service checks it is there")
	w, err := ledger.Open(ctx, svc, "run1", "runner")
	require.NoError(t, err)
	for i := range 3 {
		_, _, err := w.Append(ctx, "iteration", map[string]any{"i": i})
		require.NoError(t, err)
	}

	denied := func(what string, op func(context.Context) error) {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		assert.Error(t, op(dctx), "the service user cannot %s", what)
	}
	stream, err := svc.Stream(ctx, ledger.Stream)
	require.NoError(t, err)
	denied("delete the ledger", func(c context.Context) error { return svc.DeleteStream(c, ledger.Stream) })
	denied("purge it", func(c context.Context) error { return stream.Purge(c) })
	denied("delete a record", func(c context.Context) error { return stream.DeleteMsg(c, 2) })
	denied("reconfigure it", func(c context.Context) error {
		cfg := stream.CachedInfo().Config
		cfg.DenyPurge, cfg.MaxAge = false, time.Second
		_, err := svc.UpdateStream(c, cfg)
		return err
	})
	denied("delete the checkpoints", func(c context.Context) error { return svc.DeleteStream(c, ledger.CheckpointStream) })

	// Nor answer the JetStream API in the server's place (forged reads).
	errs := make(chan error, 1)
	spy, err := nats.Connect(srv.ClientURL(), nats.UserInfo("reporter", "reporter-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	defer spy.Close()
	_, err = spy.Subscribe("$JS.API.DIRECT.GET.LEDGER.>", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	select {
	case err := <-errs:
		assert.ErrorContains(t, err, "Permissions Violation for Subscription")
		assert.NotContains(t, err.Error(), "secret")
	case <-time.After(5 * time.Second):
		t.Fatal("the service user may listen on the JetStream API")
	}

	entries, err := ledger.Read(ctx, svc, "run1")
	require.NoError(t, err)
	assert.Len(t, entries, 3, "the ledger is whole")
	_, err = ledger.Verify("run1", entries)
	require.NoError(t, err)

	cfg := stream.CachedInfo().Config
	cfg.Description += " (changed by an operator)"
	_, err = operator.UpdateStream(ctx, cfg)
	assert.NoError(t, err, "configuration is the operators'")
}

// authServer runs a NATS server with deploy/nats/auth.conf, each user's
// password being <user>-secret.
func authServer(t *testing.T) (*server.Server, *pipelines.Topology, func(user, password string) jetstream.JetStream) {
	dir := t.TempDir()
	auth, err := os.ReadFile("nats/auth.conf")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o600))
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\njetstream { store_dir: \""+filepath.Join(dir, "js")+"\" }\ninclude ./auth.conf\n"), 0o600))
	topo, err := pipelines.Load()
	require.NoError(t, err)
	for _, u := range natsauth.Users(topo) {
		t.Setenv(natsauth.EnvName(u.Name), u.Name+"-secret")
	}
	srv := bustest.RunConfig(t, conf)
	return srv, topo, func(user, password string) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(bus.InboxPrefix(user)))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := bus.JetStream(nc)
		require.NoError(t, err)
		return js
	}
}

// refused publishes as user and reports whether the server refused it.
func refused(t *testing.T, srv *server.Server, user, subject string) bool {
	t.Helper()
	return bustest.Refused(t, subject, srv.ClientURL(), nats.UserInfo(user, user+"-secret"))
}

// What the security review found a client or a service could still do
// with its own grants, each refused: weaken a policy (only the operator
// writes the policy store), wipe or purge what others read, silence the
// SIEM forwarders through their consumers, write or read ledgers that
// are not its own, publish past a stage.
func TestClientsCannotWeakenSilenceOrForge(t *testing.T) {
	srv, topo, connect := authServer(t)
	ctx := context.Background()
	operator := connect("operator", "operator-secret")
	require.NoError(t, bus.Provision(ctx, operator, topo))
	store, err := policystore.Open(ctx, operator)
	require.NoError(t, err)
	p, err := policy.Load("../examples/policy.yaml")
	require.NoError(t, err)
	h, err := store.Push(ctx, p)
	require.NoError(t, err)

	type attack struct{ user, subject, what string }
	attacks := []attack{
		{natsauth.Audit, "$KV.troy_policies.v.x", "store a policy version"},
		{natsauth.Audit, "$KV.troy_policies.id.x", "repoint a policy id"},
		{natsauth.Audit, "$JS.API.STREAM.PURGE.TROY_OUTCOMES", "purge every run's outcomes"},
		{natsauth.Audit, "$JS.API.CONSUMER.DELETE.TROY_OUTCOMES.x", "delete another client's consumer"},
		{natsauth.Audit, "troy.ingest.step.p.0.t", "publish into another client's streamed trace"},
		{natsauth.SIEM, "$JS.API.CONSUMER.CREATE.TROY_VIOLATIONS.splunk.troy.violations.>", "rewrite the Splunk forwarder's consumer"},
		{natsauth.SIEM, "$JS.API.CONSUMER.DELETE.TROY_VIOLATIONS.syslog", "delete the syslog forwarder's consumer"},
		{natsauth.SIEM, "$JS.API.CONSUMER.CREATE.TROY_VIOLATIONS", "make a push consumer delivering anywhere"},
		{natsauth.GuardClient, "troy.ledger.check.x", "write the ledger"},
		{natsauth.GuardClient, "$JS.API.DIRECT.GET.LEDGER", "read every ledger"},
		{natsauth.GuardClient, "$JS.API.STREAM.INFO.LEDGER", "list the ledger ids"},
	}
	for _, u := range natsauth.Users(topo) {
		if u.All {
			continue
		}
		attacks = append(attacks, attack{u.Name, "$KV.troy_policies.v." + u.Name, "write the policy store"})
		attacks = append(attacks, attack{u.Name, "$JS.API.STREAM.PURGE.KV_troy_policies", "purge the policy store"})
	}
	for _, a := range attacks {
		assert.True(t, refused(t, srv, a.user, a.subject), "%s may not %s (%s)", a.user, a.what, a.subject)
	}
	assert.False(t, refused(t, srv, natsauth.Audit, "troy.ingest.run1"), "an audit client submits traces")
	assert.False(t, refused(t, srv, natsauth.SIEM, "$JS.API.DIRECT.GET.TROY_VIOLATIONS"), "a SIEM reads findings")

	// the policy is as the operator pushed it, and a client may read it
	client, err := policystore.Open(ctx, connect(natsauth.Audit, "audit-secret"))
	require.NoError(t, err)
	got, err := client.Engine(ctx, p.PolicyID)
	require.NoError(t, err)
	assert.Equal(t, h, got.Hash())
	_, err = client.Ensure(ctx, p, false)
	assert.NoError(t, err, "a version the operator pushed needs no write")
	weak := *p
	weak.Rules = weak.Rules[:1]
	_, err = client.Ensure(ctx, &weak, false)
	require.Error(t, err, "a client cannot store its own version")
	assert.Contains(t, err.Error(), "an operator pushes it first")
}

// The deployment's three nodes, as deploy/nats/nats-N.conf configure
// them, form their cluster with the route password troy nats-config
// writes; a process that reaches the cluster port without it does not
// join (a node sees every message, past every permission).
func TestOnlyNodesWithTheRoutePasswordJoinTheCluster(t *testing.T) {
	dir := t.TempDir()
	topo, err := pipelines.Load()
	require.NoError(t, err)
	for _, u := range natsauth.Users(topo) {
		t.Setenv(natsauth.EnvName(u.Name), u.Name+"-secret")
	}
	auth, err := os.ReadFile("nats/auth.conf")
	require.NoError(t, err)
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("127.0.0.1:%d", p))
	}
	cluster, err := natsauth.ClusterConfig(routes, "route-secret")
	require.NoError(t, err)
	start := func(conf string) *server.Server { return bustest.RunConfig(t, conf) }
	var nodes []*server.Server
	for i, p := range ports {
		node := filepath.Join(dir, fmt.Sprintf("nats-%d", i+1))
		require.NoError(t, os.MkdirAll(node, 0o700))
		b, err := os.ReadFile(fmt.Sprintf("nats/nats-%d.conf", i+1))
		require.NoError(t, err)
		conf := strings.NewReplacer("listen: 0.0.0.0:4222", "listen: 127.0.0.1:-1", "http: 0.0.0.0:8222", "",
			"store_dir: /data", "store_dir: \""+filepath.Join(node, "js")+"\"", "listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", p)).Replace(string(b))
		require.NotContains(t, conf, "0.0.0.0", "every address of the node's config was moved to loopback")
		for name, body := range map[string]string{"nats.conf": conf, "auth.conf": string(auth), "cluster.conf": cluster} {
			require.NoError(t, os.WriteFile(filepath.Join(node, name), []byte(body), 0o600))
		}
		nodes = append(nodes, start(filepath.Join(node, "nats.conf")))
	}
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.NumRoutes() < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "the three nodes form a cluster")

	for _, creds := range []string{"", "route:wrong@"} {
		intruder := filepath.Join(dir, "intruder"+creds[:min(len(creds), 5)])
		require.NoError(t, os.MkdirAll(intruder, 0o700))
		conf := fmt.Sprintf("listen: 127.0.0.1:-1\ncluster {\n  name: troy\n  listen: 127.0.0.1:-1\n  routes: [\"nats-route://%s%s\"]\n}\n", creds, routes[0])
		require.NoError(t, os.WriteFile(filepath.Join(intruder, "nats.conf"), []byte(conf), 0o600))
		in := start(filepath.Join(intruder, "nats.conf"))
		// the node's view, sampled for 2 s: the intruder's own may show a
		// route for the moment its handshake is being refused
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, n := range nodes {
				rz, err := n.Routez(nil)
				require.NoError(t, err)
				for _, r := range rz.Routes {
					require.NotEqual(t, in.ID(), r.RemoteID, "a server without the route password (%q) does not join", creds)
				}
			}
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
