package bustest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/troy-audit/troy/pkg/bus"
)

// Cluster is a JetStream cluster of embedded servers on loopback ports.
type Cluster struct {
	Servers []*server.Server
	// URL lists every server's client address, for a client that fails over.
	URL  string
	opts []*server.Options
	t    testing.TB
}

// RunCluster starts n clustered JetStream servers (named n1, n2, …) and
// waits until they have a meta leader.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	routes := make([]*url.URL, n)
	ports := make([]int, n)
	for i := range n {
		ports[i] = freePort(t)
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	c := &Cluster{t: t}
	var urls []string
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: freePort(t), NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "troy-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("bustest: cluster server %d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("bustest: cluster server %d did not start", i+1)
		}
		c.Servers = append(c.Servers, s)
		c.opts = append(c.opts, opts)
		urls = append(urls, s.ClientURL())
	}
	c.URL = strings.Join(urls, ",")
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("bustest: the cluster elected no JetStream leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the server of that name again (after its Shutdown), on
// the same ports and store: a node coming back.
func (c *Cluster) Restart(name string) {
	c.t.Helper()
	for i, o := range c.opts {
		if o.ServerName != name {
			continue
		}
		s, err := server.NewServer(o.Clone())
		if err != nil {
			c.t.Fatalf("bustest: restart %s: %v", name, err)
		}
		go s.Start()
		c.t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(30 * time.Second) {
			c.t.Fatalf("bustest: %s did not come back", name)
		}
		c.Servers[i] = s
		return
	}
	c.t.Fatalf("bustest: no server %s", name)
}

// Server is the running server of that name.
func (c *Cluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ProvisionedCluster starts a 3-node cluster with troy's topology at R3
// and returns it, a client that fails over between its nodes, and the
// service dependencies on that client.
func ProvisionedCluster(t testing.TB) (*Cluster, jetstream.JetStream, bus.Deps) {
	t.Helper()
	c := RunCluster(t, 3)
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := bus.JetStream(nc)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	deps, err := bus.NewDeps(js, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	deps.Topology.Replicas = 3
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := bus.Provision(ctx, js, deps.Topology)
		cancel()
		if err == nil {
			return c, js, deps
		}
		if time.Now().After(deadline) {
			t.Fatalf("bustest: provision the cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// KillLeader shuts down the node leading the cluster and brings it back
// after a pause; it returns the node's name.
func (c *Cluster) KillLeader(pause time.Duration) string {
	for _, s := range c.Servers {
		if s.JetStreamIsLeader() {
			name := s.Name()
			s.Shutdown()
			time.Sleep(pause)
			c.Restart(name)
			return name
		}
	}
	return "none"
}
