package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPoliciesCommands(t *testing.T) {
	dir := t.TempDir()
	r := troy(t, dir, "policies", "list")
	require.Equal(t, 0, r.code, r.stderr)
	for _, n := range []string{"minimal", "agent_safety", "owasp_llm_top10", "data_protection", "safe_browsing", "soc2", "hipaa"} {
		assert.Contains(t, r.stdout, n)
	}
	r = troy(t, dir, "policies", "show", "soc2")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "SOC 2 CC6.1")
	r = troy(t, dir, "policies", "show", "pci")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `no template "pci": choose one of agent_safety`)

	r = troy(t, dir, "policies", "copy", "hipaa", "-o", "mine.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "policies", "copy", "hipaa", "-o", "mine.yaml")
	assert.Equal(t, 1, r.code, "no silent overwrite")
	assert.Contains(t, r.stderr, "mine.yaml exists")
	r = troy(t, dir, "policies", "lint", "mine.yaml")
	assert.Equal(t, 0, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "mine.yaml: ok, 6 rules, sha256:")

	r = troy(t, dir, "policies", "init", "-t", "soc2", "-t", "hipaa", "-t", "minimal", "-t", "agent_safety", "-o", "merged.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	r = troy(t, dir, "policies", "lint", "merged.yaml")
	assert.Equal(t, 0, r.code, r.stdout)
	assert.Contains(t, string(read(t, dir, "merged.yaml")), "rule_id: agent_safety.destructive-shell-command")

	bad := "policy_id: p\nrules:\n  - rule_id: a\n    condition: step.type == \n  - rule_id: b\n    condition: matches(step.input, '\\s')\n    severity: urgent\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644))
	r = troy(t, dir, "policies", "lint", "bad.yaml")
	assert.Equal(t, 1, r.code)
	// every problem at once, in file order, each with its line
	assert.Equal(t, []string{
		`bad.yaml: line 4: rule "a" condition (line 1, column 12): unexpected token EOF`,
		`bad.yaml: line 6: rule "b" condition (line 1, column 23): invalid char escape`,
		`bad.yaml: line 7: rule "b" severity: "urgent" is not one of critical, high, medium, low`,
	}, problemLines(r.stdout))
	assert.Contains(t, r.stderr, "bad.yaml: 3 problems")

	// Issue 17 #4: YAML's boolean used to give a json error with no rule or line
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bool.yaml"), []byte("policy_id: p\nrules:\n  - rule_id: always\n    condition: true\n"), 0o644))
	r = troy(t, dir, "policies", "lint", "bool.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, `bool.yaml: line 4: rule "always" condition: is the YAML boolean true, not an expression`)
	assert.NotContains(t, r.stdout+r.stderr, "json: cannot unmarshal")
}

// problemLines keeps the lines of lint's output that name a problem
// (the first line of each, without the condition's excerpt).
func problemLines(out string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, " ") {
			got = append(got, l)
		}
	}
	return got
}

func TestPoliciesImport(t *testing.T) {
	dir := t.TempDir()
	old := `{"policy_id": "legacy", "rules": [
	  {"rule_id": "ok", "condition": "step['type'] == 'tool_call' and get(step, 'metadata.x') is None", "severity": "low"},
	  {"rule_id": "comprehension", "condition": "len([s for s in steps if s['type'] == 'tool_call']) > 3"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.json"), []byte(old), 0o644))

	r := troy(t, dir, "policies", "import", "old.json", "-o", "new.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `rule "comprehension" condition: column 6: "s" is not part of the supported subset`)
	_, err := os.Stat(filepath.Join(dir, "new.yaml"))
	assert.True(t, os.IsNotExist(err), "nothing written without --partial")

	r = troy(t, dir, "policies", "import", "old.json", "-o", "new.yaml", "--partial")
	assert.Equal(t, 1, r.code, "still says a rule was left out")
	assert.Contains(t, r.stdout, "wrote new.yaml: 1 rule translated")
	assert.Contains(t, string(read(t, dir, "new.yaml")), "step['type'] == 'tool_call' and get(step, 'metadata.x') == nil")
	r = troy(t, dir, "policies", "lint", "new.yaml")
	assert.Equal(t, 0, r.code, r.stdout)

	// Issue 17 #3: a chained .get was "translated" into a method call
	// that lint then refused; import now lints its own output
	chained := `{"policy_id": "legacy", "rules": [{"rule_id": "x", "condition": "step.get('metadata', {}).get('x') == 1"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chained.json"), []byte(chained), 0o644))
	r = troy(t, dir, "policies", "import", "chained.json", "-o", "chained.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, string(read(t, dir, "chained.yaml")), "get(get(step, 'metadata', {}), 'x') == 1")
	r = troy(t, dir, "policies", "lint", "chained.yaml")
	assert.Equal(t, 0, r.code, r.stdout)
}

// Issue 17 #6: the original tool's policies (JSON, Python conditions)
// were refused at load; they load as they are, translated with a notice.
func TestOriginalToolsPolicyLoadsDirectly(t *testing.T) {
	traces, _ := examples(t)
	traceFile := filepath.Join(traces, "support_bot.json")
	dir := t.TempDir()
	old := `{"policy_id": "legacy", "rules": [
	  {"rule_id": "any-tool", "condition": "step['type'] == 'tool_call' and step.get('metadata', {}).get('never') is None", "severity": "low"},
	  {"rule_id": "expr", "condition": "step.type == 'no-such-type'"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.json"), []byte(old), 0o644))
	r := troy(t, dir, "audit", traceFile, "old.json", "-o", "out/r.md", "-j", "out/a.json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "old.json: 1 condition is in the original tool's Python, translated into troy's language"), r.stderr)
	var audit struct {
		Violations []struct {
			RuleID string `json:"rule_id"`
		} `json:"violations"`
	}
	require.NoError(t, json.Unmarshal(read(t, dir, "out/a.json"), &audit))
	require.NotEmpty(t, audit.Violations, "the translated rule fired")
	assert.Equal(t, "any-tool", audit.Violations[0].RuleID)

	bad := `{"policy_id": "legacy", "rules": [{"rule_id": "comp", "condition": "len([s for s in steps if s['type'] == 'tool_call']) > 3 and step.get('x') is None"}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(bad), 0o644))
	r = troy(t, dir, "audit", traceFile, "bad.json", "-o", "out2/r.md", "-j", "out2/a.json")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `rule "comp" condition`)
	assert.Contains(t, r.stderr, `read as the original tool's Python it does not translate either: column 6: "s" is not part of the supported subset`)
}

// policies push goes to a running troy — never into a throwaway embedded
// store no server would see — and says so when nothing answers.
func TestPoliciesPushGoesToARunningTroy(t *testing.T) {
	_, policy := examples(t)
	dir := t.TempDir()
	natsURL, _ := startServe(t, dir)
	r := troy(t, dir, "policies", "push", policy, "--nats-url", natsURL)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "as the latest version of troy-examples: sha256:")

	elsewhere := t.TempDir()
	r = troy(t, elsewhere, "policies", "push", policy)
	if r.code != 0 { // nothing on troy serve's default address (the usual case here)
		assert.Contains(t, r.stderr, "nothing answers at nats://127.0.0.1:4222, troy serve's default address")
	}
	_, err := os.Stat(filepath.Join(elsewhere, ".troy-data"))
	assert.True(t, os.IsNotExist(err), "no embedded store was made")
}

// A .json output gets JSON: the extension decides the format.
func TestPolicyFilesTakeTheirExtensionsFormat(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"policies", "copy", "hipaa", "-o", "copy.json"}, {"policies", "init", "-t", "hipaa", "-o", "init.json"}} {
		r := troy(t, dir, args...)
		require.Equal(t, 0, r.code, r.stderr)
		var v map[string]any
		require.NoError(t, json.Unmarshal(read(t, dir, args[len(args)-1]), &v), "%v writes JSON", args)
		assert.NotEmpty(t, v["rules"])
		r = troy(t, dir, "policies", "lint", args[len(args)-1])
		assert.Equal(t, 0, r.code, r.stdout+r.stderr)
	}
	r := troy(t, dir, "policies", "copy", "hipaa", "-o", "copy.yaml")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, string(read(t, dir, "copy.yaml")), "policy_id: hipaa", "YAML, comments and all, for any other name")
}

// Issue 17 #7: every client command reaches a running troy (--nats-url,
// NATS_URL, else the default address) or the store agent runs left —
// never a new embedded store no running troy would see — and says plainly
// when there is nothing.
func TestClientCommandsNeverMakeAStore(t *testing.T) {
	dir := t.TempDir()
	defaultFree := !listening(DefaultServerURL)
	for _, args := range [][]string{
		{"agent", "list"}, {"agent", "show", "nosuchrun"}, {"agent", "stats"},
		{"ledger", "list"}, {"ledger", "verify", "--all"},
		{"approvals", "list"}, {"approvals", "approve", "abc", "--by", "me"},
		{"replay", "nosuchrun"},
	} {
		r := troyEnv(t, dir, []string{"TROY_DATA_DIR="}, args...)
		assert.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		if defaultFree {
			assert.Contains(t, r.stderr, "nothing answers at nats://127.0.0.1:4222, troy serve's default address", args)
		}
		_, err := os.Stat(filepath.Join(dir, ".troy"))
		assert.True(t, os.IsNotExist(err), "%v made a store", args)
	}
	// a --nats-url where nothing listens is said at once, for every command
	// (audits and agent runs used to wait 30 s, then blame provisioning)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nowhere := "nats://" + l.Addr().String()
	require.NoError(t, l.Close())
	traces, policy := examples(t)
	for _, args := range [][]string{
		{"audit", filepath.Join(traces, "support_bot.json"), policy}, {"audit-batch", traces, policy},
		{"agent", "run", filepath.Join(filepath.Dir(traces), "agents", "offline.yaml"), "x"}, {"agent", "list"}, {"ledger", "list"}, {"approvals", "list"},
		{"check", policy, "-a", "x"}, {"policies", "push", policy}, {"violations", "tail"}, {"provision"},
	} {
		r := troy(t, dir, append(args, "--nats-url", nowhere)...)
		assert.NotEqual(t, 0, r.code, args)
		assert.Contains(t, r.stderr, "nothing answers at "+nowhere, args)
	}

	// a store named by TROY_DATA_DIR (or --data-dir) must be there
	r := troy(t, dir, "ledger", "list")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no embedded store in "+filepath.Join(dir, ".troy-data"))
	_, err = os.Stat(filepath.Join(dir, ".troy-data"))
	assert.True(t, os.IsNotExist(err))
}

// Newcomer trips (issue 17's README walk): a template name works wherever
// a policy file does; swapped arguments are named as such; -o alone puts
// audit.json beside the report.
func TestPolicyArgumentsAsANewcomerWritesThem(t *testing.T) {
	traces, policy := examples(t)
	trace := filepath.Join(traces, "support_bot.json")
	dir := t.TempDir()
	r := troy(t, dir, "audit", trace, "soc2", "-o", "only/r.md")
	require.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(dir, "only", "audit.json"), "beside the report")
	assert.NoDirExists(t, filepath.Join(dir, "logs"))
	// -o naming a folder (there, or written with a trailing /) fills it
	require.NoError(t, os.Mkdir(filepath.Join(dir, "there"), 0o755))
	for _, o := range []string{"there", "new/"} {
		r = troy(t, dir, "audit", trace, "soc2", "-o", o)
		require.Equal(t, 0, r.code, r.stderr)
		assert.FileExists(t, filepath.Join(dir, o, "report.md"))
		assert.FileExists(t, filepath.Join(dir, o, "audit.json"))
	}

	r = troy(t, dir, "check", "hipaa", "-a", "bash")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"policy_id": "hipaa"`)
	r = troy(t, dir, "check", "soc3", "-a", "bash")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "nor is it a bundled template: agent_safety")

	r = troy(t, dir, "audit-batch", trace, "soc2")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is a file: audit-batch reads a folder of traces (troy audit "+trace+" POLICY audits one file)")
	r = troy(t, dir, "replay", traces)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is a folder: replay one audit in it")
	r = troy(t, dir, "check", "soc2", "-a", "x", "--timeout", "1s")
	assert.Equal(t, 1, r.code, "--timeout means nothing in process: said, not ignored")

	r = troy(t, dir, "audit", policy, trace)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "support_bot.json looks like a trace, not a policy: is the order of the arguments right? (troy audit TRACE POLICY)")
}

// Issue 17 #11: shell completion knows template names and rule ids.
func TestShellCompletionKnowsTemplatesAndRules(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.yaml"), []byte("policy_id: mine\nrules:\n  - rule_id: my-own-rule\n    condition: 'true'\n"), 0o644))
	r := troy(t, dir, "__complete", "policies", "show", "s")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "soc2\t")
	assert.Contains(t, r.stdout, "safe_browsing\t")
	assert.NotContains(t, r.stdout, "hipaa")

	r = troy(t, dir, "__complete", "check", "")
	assert.Contains(t, r.stdout, "hipaa\t")
	assert.Contains(t, r.stdout, "mine.yaml\n", "policy files too")
	r = troy(t, dir, "__complete", "policies", "init", "-t", "h")
	assert.Contains(t, r.stdout, "hipaa\t")

	r = troy(t, dir, "__complete", "violations", "tail", "--rule", "")
	assert.Contains(t, r.stdout, "my-own-rule\tmedium\n")
	assert.Contains(t, r.stdout, "pii-to-external\tcritical: ")

	r = troy(t, dir, "completion", "bash")
	require.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "__start_troy")
}

// Audits of one trace run side by side (xargs -P): one that finds the
// store in use takes a throwaway one; a batch, which resumes from its
// store, says the store is in use.
func TestOneTraceAuditsRunSideBySide(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	store := filepath.Join(dir, ".troy", "data")
	require.NoError(t, os.MkdirAll(store, 0o755))
	lock, err := os.OpenFile(filepath.Join(store, "troy.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)) // another troy holds it

	r := troyEnv(t, dir, []string{"TROY_DATA_DIR="}, "audit", filepath.Join(traces, "support_bot.json"), policy, "-o", "a/r.md")
	require.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(dir, "a", "audit.json"))
	r = troyEnv(t, dir, []string{"TROY_DATA_DIR="}, "audit-batch", traces, policy, "--out-dir", "b")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "store directory in use: another troy process is using .troy/data")
}

// import of a policy already in troy's language says so, instead of a
// list of Python errors; lint takes several files.
func TestImportOfTroysOwnPolicyAndLintOfSeveral(t *testing.T) {
	_, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "policies", "import", policy, "-o", "x.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is already in troy's language (every condition compiles as expr): nothing to import")
	assert.NotContains(t, r.stderr, "comments are not supported")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("policy_id: p\nrules:\n  - rule_id: a\n    condition: true\n"), 0o644))
	r = troy(t, dir, "policies", "lint", policy, "bad.yaml")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "policy.yaml: ok, 10 rules")
	assert.Contains(t, r.stdout, "bad.yaml: line 4: rule \"a\" condition")
}
