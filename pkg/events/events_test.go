package events

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummaryHeadersRoundTrip(t *testing.T) {
	h := nats.Header{}
	in := Summary{TraceID: "t", Steps: 4, RiskScore: 55, SeverityCounts: map[string]int{"critical": 1, "high": 0, "medium": 2, "low": 0}}
	SetSummary(h, in)
	assert.Equal(t, "critical=1,high=0,medium=2,low=0", h.Get(HeaderSeverities))
	out, err := GetSummary(h)
	require.NoError(t, err)
	assert.Equal(t, in, out)

	h.Set(HeaderSeverities, "urgent=1")
	_, err = GetSummary(h)
	assert.ErrorContains(t, err, "bad Troy-Severities header")
	_, err = GetSummary(nats.Header{})
	assert.ErrorContains(t, err, "report without summary headers")
}

func TestDecodeRejectsMalformedPayloads(t *testing.T) {
	_, err := Decode[Graphed]([]byte(`{"trace": {"trace_id": "t", "steps": [null]}}`))
	assert.ErrorContains(t, err, "steps[0] is null")
	_, err = Decode[Evaluated]([]byte(`{"trace_id": "t"}`))
	assert.ErrorContains(t, err, "without trace_id or policy_hash")
	_, err = Decode[Rejected]([]byte(`{"problems": []}`))
	assert.ErrorContains(t, err, "rejection without problems")
	_, err = Decode[Reported]([]byte(`{`))
	assert.ErrorContains(t, err, "malformed *events.Reported")
	g, err := Decode[Graphed]([]byte(`{"trace": {"trace_id": "t", "steps": [{"step_id": "1", "type": "llm_call"}]}}`))
	require.NoError(t, err)
	assert.Equal(t, "t", g.Trace.TraceID)
}

// CheckExplained refuses what Decode refuses for the trace it carries.
func TestCheckExplainedAgreesWithDecode(t *testing.T) {
	for _, body := range []string{
		`{`, `[]`, `{}`, `{"trace": null}`, `{"trace": {"trace_id": "t"}}`,
		`{"trace": {"trace_id": "t", "steps": []}}`, `{"trace": {"trace_id": "../x", "steps": [{"step_id": "1", "type": "llm_call"}]}}`,
		`{"trace": {"trace_id": "t", "steps": [null]}}`,
		`{"trace": {"trace_id": "t", "agent_name": "a", "steps": [{"step_id": "1", "type": "llm_call"}]}, "explanation": {}}`,
	} {
		_, derr := Decode[Explained]([]byte(body))
		id, cerr := CheckExplained([]byte(body))
		assert.Equal(t, derr == nil, cerr == nil, "%s: decode %v, check %v", body, derr, cerr)
		if cerr == nil {
			assert.Equal(t, "t", id)
		} else {
			assert.Contains(t, cerr.Error(), "malformed *events.Explained")
		}
	}
}

// The reporter stores an explanation on CheckExplained's word and decodes
// it later: whatever Decode accepts, CheckExplained accepts, with the same
// trace id; and neither panics on any input.
func FuzzCheckExplained(f *testing.F) {
	f.Add([]byte(`{"trace": {"trace_id": "t", "agent_name": "a", "steps": [{"step_id": "1", "type": "llm_call"}]}, "explanation": {}}`))
	f.Add([]byte(`{"trace": {"trace_id": "t", "steps": [null]}}`))
	f.Add([]byte(`{"trace": {"trace_id": "..", "steps": [{}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ex, derr := Decode[Explained](data)
		id, cerr := CheckExplained(data)
		if derr == nil && (cerr != nil || id != ex.Trace.TraceID) {
			t.Fatalf("Decode accepts %q (trace %s) but CheckExplained says %q, %v", data, ex.Trace.TraceID, id, cerr)
		}
	})
}
