package natsembed_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
