package services_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troy-audit/troy/pkg/fixtures"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/templates"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/ingest"
)

// TestEveryFixtureIngestsAndAudits walks ../shared/fixtures: every run in
// every file is read the way the ingest service reads it (format detected,
// id from its source when the format has none) and audited with the
// agent_safety template, without an error.
func TestEveryFixtureIngestsAndAudits(t *testing.T) {
	root := fixtures.Path(t, "fixtures")
	p, err := templates.Load("agent_safety")
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)

	runs := 0
	audit := func(source string, doc []byte) {
		tr, err := trace.ParseAny(doc, trace.DefaultLimits(), trace.FormatAuto, ingest.FallbackID(source))
		require.NoError(t, err, source)
		require.NotEmpty(t, tr.Steps, source)
		res := e.Evaluate(tr)
		assert.Empty(t, res.RuleErrors, source)
		ex := explain.Heuristic(tr, execgraph.Build(tr))
		assert.Len(t, ex.Steps, len(tr.Steps), source)
		runs++
	}
	files := 0
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".json") || strings.HasSuffix(path, ".jsonl")) {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		if strings.HasSuffix(path, ".jsonl") {
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 64<<20)
			for n := 1; sc.Scan(); n++ {
				audit(fmt.Sprintf("%s:%d", rel, n), append([]byte(nil), sc.Bytes()...))
			}
			return sc.Err()
		}
		// The playground file is a list of scenarios, each with its run as a
		// JSON string in "input" (the category headers have none).
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var scenarios []map[string]any
		if json.Unmarshal(raw, &scenarios) == nil && len(scenarios) > 0 && scenarios[0]["role"] == nil {
			for i, sc := range scenarios {
				switch in := sc["input"].(type) {
				case string:
					audit(fmt.Sprintf("%s#%d", rel, i), []byte(in))
				case nil:
				default:
					b, _ := json.Marshal(in)
					audit(fmt.Sprintf("%s#%d", rel, i), b)
				}
			}
			return nil
		}
		audit(rel, raw)
		return nil
	}))
	t.Logf("%d runs from %d fixture files ingested and audited", runs, files)
	assert.Equal(t, 4, files)
	assert.GreaterOrEqual(t, runs, 195+30+3+17)
}
