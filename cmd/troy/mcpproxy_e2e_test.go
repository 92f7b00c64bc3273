package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The real filesystem MCP server from npm (testdata/npm, installed by make
// test), driven by the go-sdk client through troy mcp-proxy: the tools are
// listed as the server lists them, a clean call's result is the server's
// own, and reading a .env file then writing is blocked, never forwarded.
func TestMCPProxyInFrontOfTheFilesystemServer(t *testing.T) {
	server, err := filepath.Abs("../../.cache/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	require.NoError(t, err)
	if _, err := os.Stat(server); err != nil {
		t.Fatalf("%s is missing: run make test (scripts/test-deps.sh installs testdata/npm)", server)
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "notes.txt"), []byte("hello from the notes\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(data, "secret.env"), []byte("API_KEY=sk-live-123\n"), 0o644))
	// the README's example policy
	policyFile, err := filepath.Abs("../../examples/policies/mcp_filesystem.yaml")
	require.NoError(t, err)

	natsURL, _ := startServe(t, dir) // the audit the proxy streams its sessions into
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	connect := func(cmd *exec.Cmd) *mcp.ClientSession {
		t.Helper()
		cmd.Stderr = io.Discard // the server says it is running; the test reads what it answers
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	proxied := func() *mcp.ClientSession {
		cmd := exec.CommandContext(ctx, troyBin, "mcp-proxy", "--policy", policyFile, "--nats-url", natsURL, "--", node, server, data)
		cmd.Dir = dir
		return connect(cmd)
	}
	direct := connect(exec.CommandContext(ctx, node, server, data))
	viaTroy := proxied()

	want, err := direct.ListTools(ctx, nil)
	require.NoError(t, err)
	got, err := viaTroy.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(want.Tools, byName) // the proxy lists them by name
	slices.SortFunc(got.Tools, byName)
	wj, _ := json.Marshal(want.Tools)
	gj, _ := json.Marshal(got.Tools)
	assert.JSONEq(t, string(wj), string(gj), "the upstream's tools, unchanged")

	read := &mcp.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": filepath.Join(data, "notes.txt")}}
	a, err := direct.CallTool(ctx, read)
	require.NoError(t, err)
	b, err := viaTroy.CallTool(ctx, read)
	require.NoError(t, err)
	// the payload as the server gave it (the go-sdk stamps its own
	// serverInfo in _meta on whatever it serves)
	payload := func(r *mcp.CallToolResult) string {
		j, _ := json.Marshal(map[string]any{"content": r.Content, "structuredContent": r.StructuredContent, "isError": r.IsError})
		return string(j)
	}
	assert.JSONEq(t, payload(a), payload(b), "a clean call passes through as the server answered")
	assert.Contains(t, payload(b), "hello from the notes")

	// a new connection: read the secret, then write — blocked
	attacker := proxied()
	res, err := attacker.CallTool(ctx, &mcp.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": filepath.Join(data, "secret.env")}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	out := filepath.Join(data, "exfil.txt")
	res, err = attacker.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": out, "content": "API_KEY=sk-live-123"}})
	require.NoError(t, err)
	assert.True(t, res.IsError, "blocked")
	require.NotEmpty(t, res.Content)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "rule write-after-secret (critical)")
	_, err = os.Stat(out)
	assert.True(t, os.IsNotExist(err), "the blocked write never reached the server")

	// the session was audited as it went: its finding is on troy.violations.>
	r := troy(t, dir, "violations", "tail", "--nats-url", natsURL, "--since", "1h", "--rule", "write-after-secret", "--limit", "1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"agent_name":"e2e-agent"`)
	assert.Contains(t, r.stdout, "write_file")
	require.NoError(t, attacker.Close()) // the session ends: its trace is reported
	require.Eventually(t, func() bool {
		reports, _ := filepath.Glob(filepath.Join(dir, "reports", "root", "*", "mcp-*", "report.md"))
		for _, f := range reports {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "write-after-secret") {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "the session's report, with its violation")

	// the first connection read no secret: its write goes through
	res, err = viaTroy.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": filepath.Join(data, "ok.txt"), "content": "fine"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	content, err := os.ReadFile(filepath.Join(data, "ok.txt"))
	require.NoError(t, err)
	assert.Equal(t, "fine", string(content))
}
