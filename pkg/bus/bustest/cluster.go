package bustest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
