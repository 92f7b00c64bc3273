package services_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/services/agentrunner"
	"github.com/troy-audit/troy/services/evaluator"
	"github.com/troy-audit/troy/services/explainer"
	"github.com/troy-audit/troy/services/graph"
	"github.com/troy-audit/troy/services/ingest"
	"github.com/troy-audit/troy/services/reporter"
	"github.com/troy-audit/troy/services/scorer"
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/streamer"
	"github.com/troy-audit/troy/services/syslog"
)

// What each service's code declares it reads and writes.
var services = []struct {
	consumer string
	consumes []string // subject filters
	produces []string // stages
}{
	{ingest.Consumer, ingest.Consumes, ingest.Produces},
	{streamer.Consumer, streamer.Consumes, streamer.Produces},
	{graph.Consumer, graph.Consumes, graph.Produces},
	{evaluator.Consumer, evaluator.Consumes, evaluator.Produces},
	{explainer.Consumer, explainer.Consumes, explainer.Produces},
	{scorer.Consumer, scorer.Consumes, scorer.Produces},
	{reporter.Consumer, reporter.Consumes, reporter.Produces},
	{agentrunner.Consumer, agentrunner.Consumes, agentrunner.Produces},
	{splunk.Consumer, splunk.Consumes, splunk.Produces},
	{syslog.Consumer, syslog.Consumes, syslog.Produces},
}

func streamsFor(topo *pipelines.Topology, subject string) []string {
	var out []string
	for _, st := range topo.Streams {
		for _, pat := range st.Subjects {
			if bus.SubjectMatches(pat, subject) {
				out = append(out, st.Name)
			}
		}
	}
	return out
}

func TestTopologyMatchesCode(t *testing.T) {
	topo, err := pipelines.Load()
	require.NoError(t, err)

	used := map[string]bool{}
	for _, svc := range services {
		c, ok := topo.Consumer(svc.consumer)
		require.True(t, ok, "service consumer %q is not in topology.yaml", svc.consumer)
		used[c.Name] = true
		for _, f := range svc.consumes {
			// a subject the pattern matches ("step" is a valid token for every
			// wildcard; {p} is a partition of a partitioned consumer)
			example := strings.NewReplacer(">", "x", "*", "step", "{p}", "0").Replace(f)
			assert.Equal(t, []string{c.Stream}, streamsFor(topo, example), "%s reads %s from its consumer's stream", svc.consumer, f)
		}
		assert.ElementsMatch(t, svc.consumes, c.FilterSubjects, "consumer %s filters what the service reads", c.Name)
		for _, st := range svc.produces {
			assert.Len(t, streamsFor(topo, bus.Subject(st, "r")), 1, "%s publishes %s into exactly one stream", svc.consumer, st)
		}
	}
	for _, c := range topo.Consumers {
		assert.True(t, used[c.Name], "consumer %s in topology.yaml is read by no service", c.Name)
		_, ok := topo.Stream(c.Stream)
		assert.True(t, ok, "consumer %s names unknown stream %s", c.Name, c.Stream)
	}
	for _, st := range []string{bus.StageRejected, bus.StageDLQ} {
		assert.Len(t, streamsFor(topo, bus.Subject(st, "r")), 1, "%s is stored", st)
	}
	assert.Equal(t, []string{auditor.OutcomesStream}, streamsFor(topo, bus.Subject(bus.StageReport, "r")))
	var buckets []string
	for _, b := range topo.Buckets {
		buckets = append(buckets, b.Name)
	}
	inCode := []string{reporter.JoinBucket, policystore.Bucket, guard.SessionBucket, streamer.Bucket, explain.CacheBucket, agentrun.SessionsBucket, agentrun.ApprovalsBucket, agentrun.SpendBucket}
	for _, b := range inCode {
		assert.True(t, slices.Contains(buckets, b), "bucket %s used in code is provisioned", b)
	}
	assert.ElementsMatch(t, buckets, inCode, "every provisioned bucket is used")
	assert.Positive(t, topo.ConsumerDefaults.MaxDeliver, "dead-lettering needs a delivery limit")
	redeliveries := topo.ConsumerDefaults.AckWait.Duration * time.Duration(topo.ConsumerDefaults.MaxDeliver)
	for _, st := range topo.Streams {
		assert.GreaterOrEqual(t, st.DuplicateWindow.Duration, redeliveries,
			"%s: an output republished by a redelivered input (ack_wait x max_deliver later) must still be a duplicate", st.Name)
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	require.NoError(t, bus.Provision(context.Background(), srv.JS, deps.Topology), "second provisioning changes nothing and fails nothing")
	for _, s := range deps.Topology.Streams {
		_, err := srv.JS.Stream(context.Background(), s.Name)
		assert.NoError(t, err, s.Name)
	}
}
