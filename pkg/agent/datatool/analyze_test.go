package datatool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"context"
	"encoding/json"

	"github.com/troy-audit/troy/pkg/agent/tools"
)

func newEnv(t *testing.T) (*tools.Env, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	return &tools.Env{Root: root}, dir
}

func call(t *testing.T, r *tools.Registry, env *tools.Env, name string, args any) tools.Result {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return r.Invoke(context.Background(), env, tools.Call{ID: "c1", Name: name, Arguments: b})
}

func dataEnv(t *testing.T) (*tools.Registry, *tools.Env, string) {
	t.Helper()
	r, err := tools.NewRegistry(AnalyzeData{})
	require.NoError(t, err)
	env, dir := newEnv(t)
	b, err := os.ReadFile("../../../examples/data/sales.csv")
	require.NoError(t, err)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sales.csv"), b, 0o644))
	return r, env, dir
}

func TestAnalyzeData(t *testing.T) {
	r, env, dir := dataEnv(t)
	res := call(t, r, env, "analyze_data", map[string]any{"operation": "profile", "path": "sales.csv"})
	require.True(t, res.OK, res.ModelText())
	assert.True(t, strings.HasPrefix(res.Content, "shape: 90 rows x 6 columns\n"), res.Content)
	assert.Contains(t, res.Content, "- region (VARCHAR): nulls=0 unique=5")

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "head", "path": "sales.csv", "n": 2})
	require.True(t, res.OK, res.ModelText())
	assert.True(t, res.Truncated)
	assert.Contains(t, res.Content, "[showing 2 of 90 rows]")

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "aggregate", "path": "sales.csv", "group_by": "region", "agg": map[string]any{"revenue": "sum"}})
	require.True(t, res.OK, res.ModelText())
	lines := strings.Split(res.Content, "\n")
	assert.Equal(t, "region | sum_revenue", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "East | "), res.Content)

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "query", "path": "sales.csv",
		"expression": "SELECT region, sum(units) AS u FROM data GROUP BY region ORDER BY u DESC LIMIT 3"})
	require.True(t, res.OK, res.ModelText())
	assert.Len(t, strings.Split(res.Content, "\n"), 4)

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "value_counts", "path": "sales.csv", "column": "product"})
	require.True(t, res.OK, res.ModelText())
	assert.Contains(t, res.Content, "widget | 30")

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "correlate", "path": "sales.csv"})
	require.True(t, res.OK, res.ModelText())
	assert.Contains(t, res.Content, "units")

	res = call(t, r, env, "analyze_data", map[string]any{"operation": "describe", "path": "sales.csv"})
	require.True(t, res.OK, res.ModelText())

	// JSONL too.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte("{\"a\":1}\n{\"a\":2}\n"), 0o644))
	res = call(t, r, env, "analyze_data", map[string]any{"operation": "profile", "path": "x.jsonl"})
	require.True(t, res.OK, res.ModelText())
	assert.Contains(t, res.Content, "shape: 2 rows x 1 columns")
}

func TestAnalyzeDataRefuses(t *testing.T) {
	r, env, dir := dataEnv(t)
	outside := filepath.Join(t.TempDir(), "secret.csv")
	require.NoError(t, os.WriteFile(outside, []byte("k\nsecret\n"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link.csv")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{nope"), 0o644))
	cases := []struct {
		args map[string]any
		code tools.Code
		msg  string
	}{
		{map[string]any{"operation": "profile", "path": "notes.txt"}, tools.InvalidInput, "Unsupported file type: .txt"},
		{map[string]any{"operation": "profile", "path": "missing.csv"}, tools.NotFound, "No such file"},
		{map[string]any{"operation": "profile", "path": "link.csv"}, tools.UnsafeOperation, "escapes"},
		{map[string]any{"operation": "profile", "path": "../secret.csv"}, tools.UnsafeOperation, "escapes"},
		{map[string]any{"operation": "profile", "path": "bad.json"}, tools.ExecutionFailed, "Could not parse"},
		{map[string]any{"operation": "query", "path": "sales.csv"}, tools.InvalidInput, "`expression` is required"},
		{map[string]any{"operation": "value_counts", "path": "sales.csv", "column": "nope"}, tools.InvalidInput, `No column named "nope"`},
		{map[string]any{"operation": "aggregate", "path": "sales.csv", "group_by": "nope", "agg": map[string]any{"revenue": "sum"}}, tools.InvalidInput, "No column"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "SELECT nope FROM data"}, tools.InvalidInput, "The query failed"},
		// Reading other files, writing files, extensions, settings: all refused.
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "SELECT * FROM read_csv('" + outside + "')"}, tools.InvalidInput, "The query failed"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "SELECT * FROM '" + outside + "'"}, tools.InvalidInput, "The query failed"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "COPY data TO 'out.csv'"}, tools.InvalidInput, "one read-only statement"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "SELECT 1; COPY data TO 'out.csv'"}, tools.InvalidInput, "one read-only statement"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "INSTALL httpfs"}, tools.InvalidInput, "one read-only statement"},
		{map[string]any{"operation": "query", "path": "sales.csv", "expression": "WITH x AS (SELECT 1) SELECT * FROM read_text('" + outside + "')"}, tools.InvalidInput, "The query failed"},
	}
	for _, c := range cases {
		res := call(t, r, env, "analyze_data", c.args)
		require.False(t, res.OK, "%v", c.args)
		assert.Equal(t, c.code, res.Err.Code, "%v: %s", c.args, res.Err.Message)
		assert.Contains(t, res.Err.Message, c.msg, "%v", c.args)
		assert.NotContains(t, res.ModelText(), "secret\n")
	}
	assert.NoFileExists(t, filepath.Join(dir, "out.csv"))
}

// Output stays bounded whatever the SQL: a comment cannot cut the limit
// off, blobs and wide rows are clipped, and a file is read by descriptor
// (a glob in its name reads nothing else).
func TestAnalyzeDataStaysBounded(t *testing.T) {
	r, env, dir := dataEnv(t)
	res := call(t, r, env, "analyze_data", map[string]any{"operation": "query", "path": "sales.csv",
		"expression": "SELECT 1) t, (SELECT * FROM range(20000000)) u --"})
	if res.OK {
		assert.LessOrEqual(t, strings.Count(res.Content, "\n"), MaxDataRows+3)
	}
	res = call(t, r, env, "analyze_data", map[string]any{"operation": "query", "path": "sales.csv",
		"expression": "SELECT repeat('x', 4000000)::BLOB AS b FROM range(60)"})
	require.True(t, res.OK, res.ModelText())
	assert.Less(t, len(res.Content), MaxDataContent+MaxCellChars*2)
	assert.True(t, res.Truncated)
	res = call(t, r, env, "analyze_data", map[string]any{"operation": "query", "path": "sales.csv",
		"expression": "SELECT * FROM (SELECT range AS v FROM range(100)) PIVOT (sum(v) FOR v IN (SELECT range FROM range(100)))"})
	if res.OK {
		assert.Contains(t, res.Content, "more columns")
	}

	outside := filepath.Join(t.TempDir(), "secret.csv")
	require.NoError(t, os.WriteFile(outside, []byte("k\nTOPSECRET\n"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "*"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "*", "a.csv"), []byte("k\ninside\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "out")))
	res = call(t, r, env, "analyze_data", map[string]any{"operation": "head", "path": "*/secret.csv"})
	require.False(t, res.OK)
	assert.NotContains(t, res.ModelText(), "TOPSECRET")
	require.NoError(t, os.Link(filepath.Join(dir, "sales.csv"), filepath.Join(dir, "hard.csv")))
	res = call(t, r, env, "analyze_data", map[string]any{"operation": "head", "path": "hard.csv"})
	require.False(t, res.OK)
	assert.Contains(t, res.Err.Message, "hard links")
}
