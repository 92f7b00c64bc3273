// Package bustest starts a real embedded JetStream server for tests: random
// port, temporary store, shut down when the test ends.
package bustest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/natsembed"
)

// Server is a running test server with a connection to it.
type Server struct {
	Embedded *natsembed.Server
	URL      string
	NC       *nats.Conn
	JS       jetstream.JetStream
}

// RunServer starts JetStream on 127.0.0.1 with a random port and a store in
// t.TempDir().
func RunServer(t testing.TB) *Server {
	t.Helper()
	return RunServerWith(t, natsembed.Config{})
}

// RunServerWith is RunServer with cfg's limits (its store and address are
// the test's).
func RunServerWith(t testing.TB, cfg natsembed.Config) *Server {
	t.Helper()
	cfg.StoreDir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
	emb, err := natsembed.Start(cfg)
	if err != nil {
		t.Fatalf("bustest: start server: %v", err)
	}
	nc, err := nats.Connect(emb.ClientURL())
	if err != nil {
		emb.Shutdown()
		t.Fatalf("bustest: connect: %v", err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(func() {
		nc.Close()
		emb.Shutdown()
	})
	return &Server{Embedded: emb, URL: emb.ClientURL(), NC: nc, JS: js}
}

// Provisioned starts a server with troy's topology in place and returns the
// service dependencies for it.
func Provisioned(t testing.TB) (*Server, bus.Deps) {
	t.Helper()
	return ProvisionedWith(t, natsembed.Config{})
}

// ProvisionedWith is Provisioned on a server with cfg's limits.
func ProvisionedWith(t testing.TB, cfg natsembed.Config) (*Server, bus.Deps) {
	t.Helper()
	s := RunServerWith(t, cfg)
	deps, err := bus.NewDeps(s.JS, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, s.JS, deps.Topology); err != nil {
		t.Fatalf("bustest: provision: %v", err)
	}
	return s, deps
}

// Refused publishes subject as the client opts describe and reports
// whether the server refused it for the user's permissions. The message
// carries a rollup header: a grant that would let it through would let
// the user wipe what the subject's stream holds.
func Refused(t testing.TB, subject, url string, opts ...nats.Option) bool {
	t.Helper()
	errs := make(chan error, 4)
	// a loaded machine may take more than the default 2 s to answer, or
	// garble a handshake: a few tries, each with time
	opts = append(opts, nats.Timeout(10*time.Second), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	var nc *nats.Conn
	var err error
	for try := 0; try < 3; try++ {
		if nc, err = nats.Connect(url, opts...); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, err)
	defer nc.Close()
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Rollup", "all")
	m.Data = []byte("{}")
	require.NoError(t, nc.PublishMsg(m))
	require.NoError(t, nc.Flush())
	select {
	case err := <-errs:
		return strings.Contains(err.Error(), "Permissions Violation")
	case <-time.After(3 * time.Second): // the refusal comes back asynchronously: give a loaded server time
		return false
	}
}

// RunConfig runs a NATS server from a nats-server config file (a
// deployment's own, users and all).
func RunConfig(t testing.TB, conf string) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	return srv
}
