package ocsf

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func TestFindingMapsAViolationAndValidates(t *testing.T) {
	tr := &trace.Trace{TraceID: "t1", AgentName: "bot", Steps: []*trace.Step{
		{StepID: "a", Type: "tool_call", Name: "crm"}, {StepID: "b", Type: "tool_call", Name: "http_post"}}}
	v := policy.Violation{RuleID: "cc6.1 priv*esc", StepID: "b", StepIndex: 1, Severity: "critical", Weight: 40, Description: "escalated"}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	uid := UID("key1", "b", v.RuleID, "sha256:abc")
	f := FromViolation(v, uid, Context{Trace: tr, PolicyID: "p", PolicyHash: "sha256:abc", Run: "r1", Product: "1.0", Now: now})

	assert.Equal(t, 2004, f.ClassUID)
	assert.Equal(t, 200401, f.TypeUID)
	assert.Equal(t, 5, f.SeverityID)
	assert.Equal(t, "Critical", f.Severity)
	assert.Equal(t, now.UnixMilli(), f.Time)
	assert.Equal(t, v.RuleID, f.FindingInfo.Analytic.UID)
	assert.Equal(t, "http_post", f.Evidences[0].Data["step_name"])
	assert.Equal(t, "sha256:abc", f.Unmapped["policy_hash"])
	assert.Equal(t, uid, UID("key1", "b", v.RuleID, "sha256:abc"), "stable")
	assert.NotEqual(t, uid, UID("key1", "b", v.RuleID, "sha256:def"), "another policy version is another finding")
	assert.Equal(t, "troy.violations.critical.cc6_1_priv_esc", Subject(v.Severity, v.RuleID))
	for sev, id := range map[string]int{"low": 2, "medium": 3, "high": 4, "critical": 5} {
		assert.Equal(t, id, SeverityID(sev))
	}

	raw, err := os.ReadFile("../../schemas/ocsf-detection-finding.schema.json")
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("ocsf.json", doc))
	sc, err := c.Compile("ocsf.json")
	require.NoError(t, err)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	assert.NoError(t, sc.Validate(inst))

	var missing map[string]any
	require.NoError(t, json.Unmarshal(b, &missing))
	delete(missing, "finding_info")
	assert.Error(t, sc.Validate(missing), "the schema holds OCSF's required fields")
}
