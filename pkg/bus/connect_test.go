package bus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
)

func TestRedactURLHidesPasswords(t *testing.T) {
	got := bus.RedactURL("nats://ingest:s3cret@nats-1:4222, nats://ingest:s3cret@nats-2:4222,nats://nats-3:4222")
	assert.NotContains(t, got, "s3cret")
	assert.Contains(t, got, "nats://ingest:xxxxx@nats-1:4222")
	assert.Contains(t, got, "nats://nats-3:4222")
}

// The password may come apart from the URL (TROY_NATS_PASSWORD), so it
// shows in no process list; the URL still names the user, whose inbox
// prefix the connection takes.
func TestConnectWithThePasswordApart(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "svc", Password: "pw-apart"}}}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(5*time.Second))
	host := strings.TrimPrefix(srv.ClientURL(), "nats://")

	nc, err := bus.Connect(bus.ClientConfig{URL: "nats://svc@" + host, Password: "pw-apart"})
	require.NoError(t, err)
	defer nc.Close()
	assert.True(t, strings.HasPrefix(nc.NewRespInbox(), bus.InboxPrefix("svc")))

	_, err = bus.Connect(bus.ClientConfig{URL: "nats://svc@" + host, Password: "wrong"})
	assert.Error(t, err)
	_, err = bus.Connect(bus.ClientConfig{URL: "nats://" + host, Password: "pw-apart"})
	assert.ErrorContains(t, err, "names no user")
	_, err = bus.Connect(bus.ClientConfig{URL: "nats://svc:pw-apart@" + host, Password: "pw-apart"})
	assert.ErrorContains(t, err, "given twice")
}
