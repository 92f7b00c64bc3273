package guard_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policy"
)

// Any request body gives a decision of allow or block, and block whenever
// the check fails: the guard never panics and never leaves the caller
// without an answer.
func FuzzGuardRequest(f *testing.F) {
	for _, s := range []string{
		`{"action":{"name":"bash","input":{"cmd":"rm -rf /"}}}`,
		`{"action":{"name":"http_post","metadata":{"network_zone":"external"}},"history":[{"step_id":"1","type":"tool_call","metadata":{"data_classification":"pii"}}]}`,
		`{"action":{"type":"teleport"}}`, `{"mode":"audit","action":{"name":"x"}}`, `{}`, `null`, `[]`,
		`{"action":{"name":"x"},"history":[null]}`,
	} {
		f.Add([]byte(s))
	}
	p, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		f.Fatal(err)
	}
	e, err := policy.Compile(p)
	if err != nil {
		f.Fatal(err)
	}
	g := &guard.Local{Policies: guard.Static{E: e}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req guard.Request
		if json.Unmarshal(data, &req) != nil {
			return
		}
		d, err := g.Check(context.Background(), req)
		if d.Decision != guard.Allow && d.Decision != guard.Block {
			t.Fatalf("decision %q (err %v)", d.Decision, err)
		}
		if err != nil && d.Decision != guard.Block {
			t.Fatalf("an error with decision %q: %v", d.Decision, err)
		}
	})
}
