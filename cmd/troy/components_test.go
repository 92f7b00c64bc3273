package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/natsauth"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/templates"
	"sigs.k8s.io/yaml"
)

// docker-compose.yml runs every registered component as its own container,
// each with a target the registry knows.
func TestDockerComposeMatchesTheRegistry(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	var composed []string
	for name, svc := range doc.Services {
		i := slices.Index(svc.Command, "--target")
		if len(svc.Command) == 0 || svc.Command[0] != "serve" || i < 0 || i+1 >= len(svc.Command) {
			continue
		}
		target := svc.Command[i+1]
		_, ok := lookupComponent(target)
		assert.True(t, ok, "compose service %s runs unknown target %q", name, target)
		composed = append(composed, target)
		assert.True(t, strings.HasPrefix(svc.Environment["NATS_URL"], "nats://"+target+"@"), "compose service %s connects as its own NATS user: %s", name, svc.Environment["NATS_URL"])
		assert.True(t, strings.HasPrefix(svc.Environment["TROY_NATS_PASSWORD"], "${"+natsauth.EnvName(target)+":"), "with its own password, kept out of the URL: %s", svc.Environment["TROY_NATS_PASSWORD"])
		assert.Equal(t, "1", svc.Environment["TROY_NO_PROVISION"], "compose service %s leaves provisioning to the operator", name)
	}
	for _, c := range components {
		assert.Contains(t, composed, c.name, "component %s has no compose service", c.name)
	}
	assert.True(t, strings.HasPrefix(doc.Services["provision"].Environment["NATS_URL"], "nats://operator@"), "the operator provisions")
}

// deploy/nats/auth.conf is troy nats-config --from-env's output for the
// topology as it is (regenerate: troy nats-config --from-env --force --out deploy/nats).
func TestDeployNATSUsersAreCurrent(t *testing.T) {
	topo, err := pipelines.Load()
	require.NoError(t, err)
	want, err := natsauth.Config(natsauth.Users(topo), natsauth.FromEnv)
	require.NoError(t, err)
	got, err := os.ReadFile("../../deploy/nats/auth.conf")
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "regenerate with: troy nats-config --from-env --force --out deploy/nats (and delete the credentials it writes there)")
}

func TestParseTargets(t *testing.T) {
	all, err := parseTargets("all")
	require.NoError(t, err)
	assert.Equal(t, []string{"ingest", "graph", "evaluator", "explainer", "scorer", "reporter", "streamer", "guard", "checkpointer", "agent-runner"}, all)
	got, err := parseTargets("evaluator, splunk")
	require.NoError(t, err)
	assert.Equal(t, []string{"evaluator", "splunk"}, got)
	_, err = parseTargets("evaluatr")
	assert.ErrorContains(t, err, `--target "evaluatr": want all or one or more of ingest, graph`)
	assert.Equal(t, []string{"ingest", "graph", "evaluator", "explainer", "scorer", "reporter"}, componentNames(kindStage))
	assert.Contains(t, targetHelp(), "splunk, syslog")
}

func TestSpanTakesDaysAndWeeks(t *testing.T) {
	var d time.Duration
	s := span{&d}
	for in, want := range map[string]time.Duration{"90m": 90 * time.Minute, "7d": 7 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1d12h": 36 * time.Hour, "1w1d": 8 * 24 * time.Hour} {
		require.NoError(t, s.Set(in), in)
		assert.Equal(t, want, d, in)
	}
	for _, bad := range []string{"d", "xd", "1x", "-1d", "1d-", "1d-1h", "0d-5h", "999999999w", "-5h"} {
		assert.ErrorContains(t, s.Set(bad), "write a duration such as 90m, 12h, 7d or 2w", bad)
	}
}

// A policy written as YAML reads back the same (same hash), keys in the
// order people read them, whatever its conditions hold.
func TestEncodedPoliciesReadBackTheSame(t *testing.T) {
	tricky := &policy.Policy{PolicyID: "p", Rules: []policy.Rule{
		{RuleID: "a", Condition: "`^x` matches step.name", Severity: "low"},
		{RuleID: "b: c", Condition: "step.name == 'a: b' or step.name == '# not a comment'", Severity: "high", Controls: []string{"SOC 2 CC6.1"}},
		{RuleID: "c", Condition: "step.name in ['yes', 'no', 'null', '007']\nand true", Severity: "medium", Description: "- looks like a list"},
		{RuleID: "on", Condition: "true", Description: "yes", Controls: []string{"Yes", "N", "off", "~", "null", "0x1F"}},
	}}
	raw, err := json.Marshal(tricky)
	require.NoError(t, err)
	tricky, err = policy.Parse(raw) // defaults filled, as every loaded policy
	require.NoError(t, err)
	ps := []*policy.Policy{tricky}
	for _, n := range templates.Names() {
		p, err := templates.Load(n)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		_, err := policy.Compile(p)
		require.NoError(t, err, p.PolicyID)
		for _, path := range []string{"p.yaml", "p.json"} {
			b, err := encodePolicy(path, p)
			require.NoError(t, err)
			back, err := policy.Parse(b)
			require.NoError(t, err, "%s\n%s", path, b)
			assert.Equal(t, p.Hash(), back.Hash(), "%s %s", p.PolicyID, path)
		}
	}
	b, err := encodePolicy("p.yaml", tricky)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "policy_id: p\nrules:\n  - rule_id: a\n"), string(b))
}
