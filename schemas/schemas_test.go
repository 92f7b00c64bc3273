package schemas

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/trace"
)

// TestSchemasMatchGoTypes regenerates every schema from its Go type and
// compares it with the published file. UPDATE_SCHEMAS=1 rewrites the files.
func TestSchemasMatchGoTypes(t *testing.T) {
	for _, s := range All {
		got, err := Generate(s)
		require.NoError(t, err)
		if os.Getenv("UPDATE_SCHEMAS") != "" {
			require.NoError(t, os.WriteFile(s.File, got, 0o644))
			continue
		}
		want, err := os.ReadFile(s.File)
		require.NoError(t, err, "run make schemas")
		assert.Equal(t, string(want), string(got), "%s is out of date with the Go types: run make schemas", s.File)
	}
}

func compile(t *testing.T, file string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, s := range All {
		b, err := Files.ReadFile(s.File)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		require.NoError(t, err)
		require.NoError(t, c.AddResource("https://troy.dev/schemas/"+s.File, doc))
	}
	sc, err := c.Compile("https://troy.dev/schemas/" + file)
	require.NoError(t, err)
	return sc
}

func validate(t *testing.T, sc *jsonschema.Schema, v any) error {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return sc.Validate(doc)
}

// TestRealDocumentsValidate checks shipped examples and real troy output
// against the schemas, and that the schemas reject what troy rejects.
func TestRealDocumentsValidate(t *testing.T) {
	traceSchema := compile(t, "trace.schema.json")
	files, err := filepath.Glob("../examples/traces/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var parsed []*trace.Trace
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tr, err := trace.Parse(b, trace.DefaultLimits())
		require.NoError(t, err, f)
		parsed = append(parsed, tr)
		assert.NoError(t, validate(t, traceSchema, tr), f)
	}
	var bad map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{"trace_id":"t","agent_name":"a","steps":[{"step_id":"1","type":"teleport"}]}`), &bad))
	assert.Error(t, validate(t, traceSchema, bad), "the schema rejects an unknown step type, as ingest does")

	policySchema := compile(t, "policy.schema.json")
	pb, err := os.ReadFile("../examples/policy.yaml")
	require.NoError(t, err)
	pj, err := yaml.YAMLToJSON(pb)
	require.NoError(t, err)
	var pdoc any
	require.NoError(t, json.Unmarshal(pj, &pdoc))
	assert.NoError(t, validate(t, policySchema, pdoc))
	p, err := policy.Parse(pb)
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)

	auditSchema := compile(t, "audit.schema.json")
	var entries []report.Entry
	for _, tr := range parsed {
		g := execgraph.Build(tr)
		ex := explain.Heuristic(tr, g)
		res := e.Evaluate(tr)
		sc := score.Compute(res.Violations)
		a := &report.Audit{SchemaVersion: report.SchemaVersion, Trace: tr, PolicyID: p.PolicyID, PolicyHash: e.Hash(), Graph: g,
			ExplanationSource: ex.Source, Summary: ex.Summary, Explanations: ex.Steps, Violations: res.Violations,
			RuleErrors: res.RuleErrors, RiskScore: sc.RiskScore, SeverityCounts: sc.SeverityCounts}
		assert.NoError(t, validate(t, auditSchema, a), tr.TraceID)
		entries = append(entries, report.Entry{Source: tr.TraceID + ".json", TraceID: tr.TraceID, Steps: len(tr.Steps),
			Status: report.StatusAudited, SeverityCounts: sc.SeverityCounts, RiskScore: sc.RiskScore})
	}
	entries = append(entries, report.Entry{Source: "x.json", Status: report.StatusRejected, Problems: []string{"bad JSON"}})
	b := report.NewBatch(p.PolicyID, e.Hash(), entries, p0, p0)
	assert.NoError(t, validate(t, compile(t, "batch.schema.json"), b))
	assert.True(t, strings.HasPrefix(e.Hash(), "sha256:"))
}

var p0 = mustTime("2026-11-30T00:00:00Z")

func TestGuardMessagesValidate(t *testing.T) {
	req := guard.Request{SessionID: "s1", Action: guard.Action{Name: "http_post", Input: map[string]any{"url": "https://x"}},
		History: []*trace.Step{{StepID: "1", Type: "tool_call", Name: "crm"}}}
	assert.NoError(t, validate(t, compile(t, "guard-request.schema.json"), req))
	p, err := policy.Parse([]byte("policy_id: p\nrules:\n  - rule_id: r\n    condition: step.name == 'http_post'\n"))
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)
	d, err := (&guard.Local{Policies: guard.Static{E: e}}).Check(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, guard.Block, d.Decision)
	assert.NoError(t, validate(t, compile(t, "guard-decision.schema.json"), d))
}
