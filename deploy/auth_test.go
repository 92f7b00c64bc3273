// Package deploy holds the deployment files; its tests run them.
package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/natsauth"
)

// A NATS server run with deploy/nats/auth.conf: troy's services append to
// the ledger under their own users and cannot delete, purge or reconfigure
// it, nor delete a record, nor answer the JetStream API; the operator
// provisions and may reconfigure.
func TestServicesCannotRewriteTheLedger(t *testing.T) {
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
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))

	connect := func(user, password string) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password), nats.CustomInboxPrefix(bus.InboxPrefix(user)))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := bus.JetStream(nc)
		require.NoError(t, err)
		return js
	}
	_, err = nats.Connect(srv.ClientURL())
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
