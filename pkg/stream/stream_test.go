package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func engine(t *testing.T) *policy.Engine {
	t.Helper()
	p, err := policy.Parse([]byte(`
policy_id: streaming
rules:
  - rule_id: shell
    condition: step.name == 'bash'
  - rule_id: pii-then-external
    condition: get(step, 'metadata.data_classification') == 'pii' and any_next({ get(#, 'metadata.network_zone') == 'external' })
  - rule_id: never-confirmed
    condition: step.name == 'book' and not any_next({ .name == 'confirm' })
`))
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)
	return e
}

func step(id, name string, meta map[string]any) *trace.Step {
	return &trace.Step{StepID: id, Type: "tool_call", Name: name, Metadata: meta}
}

func ids(vs []policy.Violation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.RuleID+"@"+v.StepID)
	}
	return out
}

func TestVerdictsComeWhenCertainAndOnce(t *testing.T) {
	e := engine(t)
	now := time.Now()
	s := New("t", "bot", nil, false, e.Hash(), now)
	var seq uint64
	push := func(st ...*trace.Step) []string {
		seq++
		from, err := s.Add(st, seq, 100, DefaultLimits(), now)
		require.NoError(t, err)
		return ids(s.Decide(e, from))
	}
	assert.Equal(t, []string{}, push(step("1", "crm", map[string]any{"data_classification": "pii"})), "nothing certain yet")
	assert.Equal(t, []string{"shell@2"}, push(step("2", "bash", nil)), "decided on arrival")
	assert.Equal(t, []string{}, push(step("3", "book", nil)), "never-confirmed waits for the end")
	assert.Equal(t, []string{"pii-then-external@1"}, push(step("4", "post", map[string]any{"network_zone": "external"})),
		"the look-ahead fires when the later step arrives")
	assert.Equal(t, []string{}, push(step("4", "post", nil)), "a duplicate step changes nothing")
	assert.Equal(t, []string{"never-confirmed@3"}, ids(s.Finish(e, "", nil)), "decided at the end")
	assert.Equal(t, []string{}, ids(s.Finish(e, "", nil)), "and reported once")
}

func TestConfirmedBookingNeverFires(t *testing.T) {
	e := engine(t)
	s := New("t", "bot", nil, false, e.Hash(), time.Now())
	_, err := s.Add([]*trace.Step{step("1", "book", nil), step("2", "confirm", nil)}, 1, 10, DefaultLimits(), time.Now())
	require.NoError(t, err)
	assert.Empty(t, s.Decide(e, 0))
	assert.Empty(t, s.Finish(e, "", nil))
}

func TestOutOfOrderStepsAreOrderedByTimestamp(t *testing.T) {
	e := engine(t)
	s := New("t", "bot", nil, false, e.Hash(), time.Now())
	late := step("b", "crm", map[string]any{"data_classification": "pii"})
	late.Timestamp = "2026-11-30T10:00:01Z"
	early := step("a", "login", nil)
	early.Timestamp = "2026-11-30T10:00:00Z"
	post := step("c", "post", map[string]any{"network_zone": "external"})
	post.Timestamp = "2026-11-30T10:00:02Z"
	var fired []string
	for i, st := range []*trace.Step{post, late, early} { // arrive backwards
		from, err := s.Add([]*trace.Step{st}, uint64(i+1), 10, DefaultLimits(), time.Now())
		require.NoError(t, err)
		fired = append(fired, ids(s.Decide(e, from))...)
	}
	var order []string
	for _, st := range s.Steps {
		order = append(order, st.StepID)
	}
	assert.Equal(t, []string{"a", "b", "c"}, order)
	assert.Equal(t, []string{"pii-then-external@b"}, fired, "the PII step fired once the earlier-sent post was in place")
	assert.Equal(t, 2, s.Reordered, "two steps landed before one already decided")
}

func TestLimitsCloseATrace(t *testing.T) {
	s := New("t", "bot", nil, false, "h", time.Now())
	_, err := s.Add([]*trace.Step{step("1", "a", nil), step("2", "b", nil), step("3", "c", nil)}, 1, 10, Limits{MaxSteps: 2}, time.Now())
	assert.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "3 steps, over the 2-step limit (the last 1 were not taken)")
	assert.Len(t, s.Steps, 2, "the steps that fit are taken, and audited when the trace closes")
	_, err = New("t", "bot", nil, false, "h", time.Now()).Add([]*trace.Step{step("1", "a", nil)}, 1, 500, Limits{MaxBytes: 100}, time.Now())
	assert.ErrorContains(t, err, "500 bytes, over the 100-byte limit")
}

// A rule that reads the agent's metadata waits for the end, which may bring
// it, unless the metadata was given up front: a verdict decided on a guess
// ("not admin" before the metadata came) would be a false alarm.
func TestRulesReadingMetadataWaitUnlessGivenUpFront(t *testing.T) {
	p, err := policy.Parse([]byte(`
policy_id: meta
rules:
  - rule_id: privilege-escalation
    condition: get(agent, 'metadata.permission_level') != 'admin' and get(step, 'metadata.permission_level') == 'admin'
`))
	require.NoError(t, err)
	e, err := policy.Compile(p)
	require.NoError(t, err)
	admin := step("1", "sudo", map[string]any{"permission_level": "admin"})

	late := New("t", "bot", nil, false, e.Hash(), time.Now())
	from, err := late.Add([]*trace.Step{admin}, 1, 10, DefaultLimits(), time.Now())
	require.NoError(t, err)
	assert.Empty(t, late.Decide(e, from), "the agent's metadata may still come")
	assert.Empty(t, late.Finish(e, "", map[string]any{"permission_level": "admin"}), "it came: an admin agent, no escalation")

	upFront := New("t", "bot", map[string]any{"permission_level": "user"}, true, e.Hash(), time.Now())
	from, err = upFront.Add([]*trace.Step{admin}, 1, 10, DefaultLimits(), time.Now())
	require.NoError(t, err)
	assert.Equal(t, []string{"privilege-escalation@1"}, ids(upFront.Decide(e, from)), "decided on arrival")
	assert.Empty(t, upFront.Finish(e, "", map[string]any{"permission_level": "admin"}), "metadata given up front stays")
}

// Timestamps are compared as times: "…:00.5Z" comes after "…:00Z", though
// as text it sorts before it.
func TestFractionalTimestampsKeepTheirOrder(t *testing.T) {
	s := New("t", "bot", nil, false, "h", time.Now())
	a, b := step("a", "x", nil), step("b", "y", nil)
	a.Timestamp, b.Timestamp = "2026-11-30T11:00:00Z", "2026-11-30T11:00:00.5Z"
	for i, st := range []*trace.Step{a, b} {
		_, err := s.Add([]*trace.Step{st}, uint64(i+1), 10, DefaultLimits(), time.Now())
		require.NoError(t, err)
	}
	assert.Equal(t, "a", s.Steps[0].StepID)
	assert.Zero(t, s.Reordered)
}
