package natsembed_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/troy-audit/troy/pkg/natsembed"
)

// The libraries people embed (the guard SDK, the client side of the bus,
// the policy engine, the trace model) do not link nats-server: only this
// package does.
func TestLibrariesDoNotLinkTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{"../guard", "../bus", "../policy", "../trace", "../policystore", "../report", "../httpapi", "../agentrun", "../agent/spec"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		for _, dep := range strings.Fields(string(out)) {
			assert.NotContains(t, dep, "nats-server", "%s links %s", pkg, dep)
		}
	}
}

// An address already taken is said at once, not after the server's 30 s
// wait to become ready.
func TestAddressInUseIsSaidAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Listen: l.Addr().String()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot listen on "+l.Addr().String())
	assert.Contains(t, err.Error(), "give --nats-addr another address")
}
