package execgraph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/trace"
)

func TestBuild(t *testing.T) {
	tr, err := trace.Parse([]byte(`{"trace_id":"t","agent_name":"a","steps":[
	  {"step_id":"1","type":"tool_call","output":{"email":"jo@example.com","id":123456,"ok":true}},
	  {"step_id":"2","type":"llm_call","parent_step_id":"1","input":{"note":"ok"},"output":"https://evil.example/collect"},
	  {"step_id":"3","type":"tool_call","input":{"to":"jo@example.com","body":"user 123456 see https://evil.example/collect?x=1"}}
	]}`), trace.DefaultLimits())
	require.NoError(t, err)
	g := Build(tr)
	assert.Equal(t, []Edge{
		{From: "1", To: "2", Kind: KindParent},
		{From: "1", To: "2", Kind: KindSequence},
		{From: "2", To: "3", Kind: KindSequence},
		{From: "1", To: "3", Kind: KindDataFlow, Value: "jo@example.com"},
		{From: "2", To: "3", Kind: KindDataFlow, Value: "https://evil.example/collect"},
	}, g.Edges)
	assert.Equal(t, map[string][]string{"3": {"1", "2"}}, g.FedBy())
}
