package siem

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func finding() ocsf.Finding {
	tr := &trace.Trace{TraceID: "t|1", AgentName: "bot=x", Steps: []*trace.Step{{StepID: "s1", Type: "tool_call"}}}
	v := policy.Violation{RuleID: "pii|exfil", StepID: "s1", Severity: "high", Weight: 20, Description: "sent a=b\nout"}
	return ocsf.FromViolation(v, "troy-uid1", ocsf.Context{Trace: tr, PolicyID: "p", PolicyHash: "sha256:x", Product: "1.2",
		Now: time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)})
}

func TestCEFEscapesAndMapsSeverity(t *testing.T) {
	c := CEF(finding())
	assert.True(t, strings.HasPrefix(c, `CEF:0|troy|troy|1.2|pii\|exfil|pii\|exfil: sent a=b out|8|`), c)
	assert.Contains(t, c, `msg=sent a\=b\nout`)
	assert.Contains(t, c, `cs1Label=trace_id cs1=t|1`)
	assert.Contains(t, c, `suser=bot\=x`)
	assert.Contains(t, c, `externalId=troy-uid1`)
}

func TestSyslogFrame(t *testing.T) {
	s := Syslog(finding(), "host1", "troy")
	assert.True(t, strings.HasPrefix(s, "<83>1 2026-11-30T01:02:03.000Z host1 troy "), s) // 10*8 + 3 (err)
	assert.Contains(t, s, " troy-finding - CEF:0|troy|")
}

func TestHECBatch(t *testing.T) {
	b, err := HECBatch([]HECEvent{HEC(finding(), "sec"), HEC(finding(), "")})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &e))
	assert.Equal(t, "ocsf:detection_finding", e["sourcetype"])
	assert.Equal(t, "sec", e["index"])
	assert.InDelta(t, float64(time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC).Unix()), e["time"], 0.001)
	assert.Equal(t, float64(2004), e["event"].(map[string]any)["class_uid"])
}
