// Package streamtest checks streamed findings against a batch audit, for
// the streaming tests of several packages.
package streamtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Findings reads every finding stored on troy.violations.> (what a SIEM
// that connects late reads), as "trace/rule@step" -> copies.
func Findings(t testing.TB, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, pipelines.StreamViolations, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	out := map[string]int{}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(300*time.Millisecond))
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var f ocsf.Finding
			require.NoError(t, json.Unmarshal(m.Data(), &f))
			out[fmt.Sprint(f.Unmapped["trace_id"], "/", f.FindingInfo.Analytic.UID, "@", f.Unmapped["step_id"])]++
		}
		if n == 0 {
			return out
		}
	}
}

// Batch is what a batch audit of the traces finds, in Findings' form.
func Batch(e *policy.Engine, traces ...*trace.Trace) map[string]int {
	out := map[string]int{}
	for _, tr := range traces {
		for _, v := range e.Evaluate(tr).Violations {
			out[tr.TraceID+"/"+v.RuleID+"@"+v.StepID] = 1
		}
	}
	return out
}

// AssertSame compares streamed findings with a batch audit's, naming only
// the differences: extra (false alerts), missing, and repeated findings.
func AssertSame(t testing.TB, want, got map[string]int) {
	t.Helper()
	var extra, missing, twice []string
	for k, n := range got {
		if want[k] == 0 {
			extra = append(extra, k)
		}
		if n > 1 {
			twice = append(twice, k)
		}
	}
	for k := range want {
		if got[k] == 0 {
			missing = append(missing, k)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	sort.Strings(twice)
	assert.Empty(t, extra, "streamed, but not violations of the batch audit (false alerts)")
	assert.Empty(t, missing, "violations of the batch audit never streamed")
	assert.Empty(t, twice, "published more than once")
	t.Logf("%d findings streamed, %d violations in the batch audit", len(got), len(want))
}
