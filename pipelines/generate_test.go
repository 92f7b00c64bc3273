package pipelines

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// names.go is what topology.yaml generates: run `go generate ./pipelines`
// after changing the topology.
func TestNamesAreGenerated(t *testing.T) {
	topo, err := Load()
	require.NoError(t, err)
	want, err := GenerateNames(topo)
	require.NoError(t, err)
	got, err := os.ReadFile(NamesFile)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "pipelines/names.go is stale: run go generate ./pipelines")
}
