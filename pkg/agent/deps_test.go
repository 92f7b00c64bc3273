package agent_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The loop, its tools and its config link neither NATS nor DuckDB (cgo):
// a program can embed the agent without either; only the analyze_data
// tool (pkg/agent/datatool) brings DuckDB, and pkg/agentrun the bus.
func TestTheLoopIsPureGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{".", "./tools", "./skills"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"duckdb", "nats-io", "nats-server"} {
				assert.NotContains(t, dep, banned, "%s links %s", pkg, dep)
			}
		}
	}
}
