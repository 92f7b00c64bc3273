package spec_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/llm"
)

// The shipped offline example runs to complete with no key and no network.
func TestOfflineExampleCompletes(t *testing.T) {
	f, err := spec.Load("../../../examples/agents/offline.yaml", nil)
	require.NoError(t, err)
	rec := &agent.Recorder{}
	cfg, err := f.Build(spec.Deps{Workspace: "../../..", Sink: rec})
	require.NoError(t, err)
	a, err := agent.New(cfg)
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "Profile examples/data/sales.csv and name the top 3 regions", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, res.Status, res.Answer)
	assert.Contains(t, res.Answer, "East 25,312.50")
	assert.Equal(t, 3, res.Iterations)
	assert.Empty(t, rec.Of(agent.EventContractViolation))
	// The figures the script claims are the ones the tool computed.
	results := rec.Of(agent.EventToolResult)
	require.Len(t, results, 3)
	assert.Contains(t, results[1].Data["preview"], "East | 25312.5\nNorth | 23919.25\nWest | 23169.5")
	assert.Contains(t, results[0].Data["preview"], "shape: 90 rows x 6 columns")
	start := rec.Of(agent.EventRunStart)[0]
	assert.Equal(t, []string{"audit-trace", "profile-data", "write-report"}, start.Data["skills"])
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func TestConfigProblems(t *testing.T) {
	_, err := spec.Load(write(t, "a.toml", "x"), nil)
	assert.ErrorContains(t, err, "unrecognized config extension")
	_, err = spec.Load(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	assert.ErrorContains(t, err, "not found")

	_, err = spec.Load(write(t, "a.yaml", `
name: x
llm: {provider: openai, model: m, api_key: "${TROY_TEST_UNSET_KEY}", temprature: 1}
tools: [file_system, teleport]
budget: {max_iterations: "ten", max_wall_seconds: -1}
colour: red
`), nil)
	require.Error(t, err)
	var se *spec.Error
	require.ErrorAs(t, err, &se)
	msg := err.Error()
	for _, want := range []string{
		"colour: unknown key; allowed: name, llm, tools",
		"llm.temprature: unknown key; allowed: provider, model, base_url, api_key",
		"budget.max_iterations: got string, want integer",
		"budget.max_wall_seconds: ",
		"llm.api_key: ${TROY_TEST_UNSET_KEY} is not set",
	} {
		assert.Contains(t, msg, want)
	}
	// Problems the schema cannot see come with the schema's, all at once
	// (they used to wait until the schema's were fixed)
	_, err = spec.Load(write(t, "b.yaml", "name: x\nllm: {provider: scripted}\ntools: [teleport]\nbudget: {max_iterations: -3}\nbogus: 1\n"), nil)
	assert.ErrorContains(t, err, `tools[0]: "teleport" is not a built-in tool`)
	assert.ErrorContains(t, err, "llm.script: the scripted provider needs")
	assert.ErrorContains(t, err, "budget.max_iterations: minimum")
	assert.ErrorContains(t, err, "bogus: unknown key")

	t.Setenv("TROY_TEST_KEY", "sk-from-env")
	f, err := spec.Load(write(t, "c.json", `{"name": "x", "llm": {"provider": "openai", "model": "m", "api_key": "${TROY_TEST_KEY}"}}`), nil)
	require.NoError(t, err)
	assert.Equal(t, "sk-from-env", f.LLM.APIKey)
	f, err = spec.Load(write(t, "d.yaml", "name: x\nllm: {provider: openai, model: m, api_key: '${FROM_DOTENV}'}\n"),
		func(k string) (string, bool) { return "dot-" + k, k == "FROM_DOTENV" })
	require.NoError(t, err)
	assert.Equal(t, "dot-FROM_DOTENV", f.LLM.APIKey)
}

func TestBuildProblems(t *testing.T) {
	f, err := spec.Load(write(t, "a.yaml", "name: x\nllm: {provider: nope}\n"), nil)
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{})
	assert.ErrorContains(t, err, `unknown llm provider "nope"; known: openai, scripted`)

	// A skill that names a tool the run does not have fails at start.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "skills", "s"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "skills", "s", "SKILL.md"), []byte("---\nname: s\ndescription: d\ntools: [execute_code]\n---\nbody\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.yaml"), []byte("responses: [{text: hi}]\n"), 0o644))
	cfgPath := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("name: x\nllm: {provider: scripted, script: script.yaml}\ntools: [file_system, load_skill]\nskills: {dirs: [skills]}\n"), 0o644))
	f, err = spec.Load(cfgPath, nil)
	require.NoError(t, err)
	cfg, err := f.Build(spec.Deps{Workspace: dir})
	require.NoError(t, err)
	_, err = agent.New(cfg)
	assert.ErrorContains(t, err, "skill/tool mismatch: skill 's' references unregistered tool 'execute_code'")
}

func TestPortableKeepsSecretsOut(t *testing.T) {
	t.Setenv("TROY_TEST_KEY", "sk-very-secret")
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: openai, model: m, api_key: '${TROY_TEST_KEY}'}\nworkspace: ws\naudit: {policy: agent_safety}\nskills: {dirs: [sk]}\n"), 0o644))
	b, err := spec.Portable(p)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "sk-very-secret")
	assert.Contains(t, string(b), "${TROY_TEST_KEY}")
	f, err := spec.Parse(b, "request", nil)
	require.NoError(t, err)
	assert.Equal(t, "sk-very-secret", f.LLM.APIKey, "the runner reads it from its own environment")
	assert.Equal(t, filepath.Join(dir, "ws"), f.Workspace)
	assert.Equal(t, []string{filepath.Join(dir, "sk")}, f.Skills.Dirs)
	assert.Equal(t, "agent_safety", f.Audit.Policy)
}

func TestOpenAISettingsFromTheEnvironment(t *testing.T) {
	p := write(t, "a.yaml", "name: x\nllm: {provider: openai, model: m}\n")
	f, err := spec.Load(p, nil)
	require.NoError(t, err)
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	_, err = f.Build(spec.Deps{Workspace: t.TempDir()})
	assert.ErrorContains(t, err, "provider openai needs api_key (or OPENAI_API_KEY")
	dotenv := spec.EnvThen(func(k string) (string, bool) { return "sk-dotenv", k == "OPENAI_API_KEY" })
	_, err = f.Build(spec.Deps{Workspace: t.TempDir(), Settings: dotenv})
	assert.NoError(t, err, "a key in .env is enough")

	// The default key never goes to a base_url the config chose.
	p = write(t, "b.yaml", "name: x\nllm: {provider: openai, model: m, base_url: 'https://elsewhere.example/v1'}\n")
	f, err = spec.Load(p, nil)
	require.NoError(t, err)
	var seen llm.ProviderConfig
	providers := llm.DefaultProviders()
	providers.Register("openai", func(c llm.ProviderConfig) (llm.Provider, error) { seen = c; return &llm.Scripted{}, nil })
	_, err = f.Build(spec.Deps{Workspace: t.TempDir(), Settings: dotenv, Providers: providers})
	require.NoError(t, err)
	assert.Empty(t, seen.APIKey)
}

func TestDuplicateKeysAndRestrictedVariables(t *testing.T) {
	_, err := spec.Parse([]byte("name: x\nname: y\nllm: {provider: scripted, script: s}\n"), "dup", nil)
	assert.ErrorContains(t, err, "already set")
	_, err = spec.Parse([]byte(`{"name": "x", "name": "y", "llm": {"provider": "scripted", "script": "s"}}`), "dup", nil)
	assert.Error(t, err)

	t.Setenv("TROY_TEST_SECRET", "sk-runner")
	t.Setenv("TROY_TEST_OK", "fine")
	runner := spec.Only([]string{"TROY_TEST_OK"}, spec.EnvThen(nil))
	_, err = spec.ParseWith([]byte("name: x\nllm: {provider: openai, model: m, base_url: 'https://evil.example/${TROY_TEST_SECRET}'}\n"), "req", runner)
	assert.ErrorContains(t, err, "${TROY_TEST_SECRET} is not set")
	f, err := spec.ParseWith([]byte("name: x\nllm: {provider: openai, model: '${TROY_TEST_OK}'}\n"), "req", runner)
	require.NoError(t, err)
	assert.Equal(t, "fine", f.LLM.Model)
}

func TestGuardrailsAndGovernanceConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("responses: [{text: hi}]\n"), 0o644))
	load := func(extra string) (*spec.File, error) {
		p := filepath.Join(dir, "agent.yaml")
		require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: scripted, script: s.yaml}\n"+extra), 0o644))
		return spec.Load(p, nil)
	}
	f, err := load("tools: [file_system, execute_code, submit]\ngovernance: {allowed_tools: [file_system]}\n")
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{Workspace: dir})
	assert.ErrorContains(t, err, "governance.allowed_tools does not allow execute_code")

	f, err = load("guardrails: {tool_tiers: {file_system: RISKY}}\n")
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{Workspace: dir})
	assert.ErrorContains(t, err, `guardrails.tool_tiers.file_system: "RISKY" is not SAFE, WARNING or DANGER`)

	_, err = load("guardrails: {approver: {type: psychic}}\n")
	assert.ErrorContains(t, err, "guardrails.approver.type")

	f, err = load("guardrails: {enabled: false}\n")
	require.NoError(t, err)
	assert.False(t, f.GuardrailsOn())
	cfg, err := f.Build(spec.Deps{Workspace: dir})
	require.NoError(t, err)
	assert.Nil(t, cfg.Gate)

	f, err = load("guardrails: {approval_threshold: WARNING, approver: {type: auto, ceiling: WARNING}}\n")
	require.NoError(t, err)
	cfg, err = f.Build(spec.Deps{Workspace: dir})
	require.NoError(t, err)
	assert.NotNil(t, cfg.Gate, "guardrails are on unless turned off")
}

func TestProviderPolicy(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("responses: [{text: hi}]\n"), 0o644))
	p := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: scripted, script: s.yaml, model: m1}\nprovider_policy: {allowed_providers: [openai]}\n"), 0o644))
	f, err := spec.Load(p, nil)
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{Workspace: dir})
	assert.ErrorContains(t, err, `provider policy: provider "scripted" is not allowed (allowed: openai)`)

	operator, err := spec.ParseProviderPolicy("", "scripted:gpt-4.1*")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: scripted, script: s.yaml, model: m1}\n"), 0o644))
	f, err = spec.Load(p, nil)
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{Workspace: dir, ProviderPolicy: operator})
	assert.ErrorContains(t, err, `model "m1" of provider scripted is not allowed (allowed: gpt-4.1*)`)
	require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: scripted, script: s.yaml, model: gpt-4.1-mini}\n"), 0o644))
	f, err = spec.Load(p, nil)
	require.NoError(t, err)
	_, err = f.Build(spec.Deps{Workspace: dir, ProviderPolicy: operator})
	assert.NoError(t, err)
	_, err = spec.ParseProviderPolicy("", "gpt-4o")
	assert.ErrorContains(t, err, "want provider:model")
}

// What would be accepted and then match nothing is refused.
func TestGuardrailsConfigMatchesSomething(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("responses: [{text: hi}]\n"), 0o644))
	for extra, want := range map[string]string{
		"guardrails: {sensitive_operations: [file_system:Delete]}":        `"Delete" is not an operation of file_system`,
		"guardrails: {sensitive_operations: [filesystem]}":                `"filesystem" is not a tool`,
		"guardrails: {downgrade: {shell: SAFE}}":                          `"shell" is not a tool`,
		"guardrails: {protected_paths: ['*.yaml']}":                       `not patterns`,
		"guardrails: {policy_actions: {r: explode}}":                      `"explode" is not block, escalate or log`,
		"guardrails: {content_safety: {dispositions: {rudeness: block}}}": `"rudeness" is not harmful_intent`,
	} {
		p := filepath.Join(dir, "agent.yaml")
		require.NoError(t, os.WriteFile(p, []byte("name: x\nllm: {provider: scripted, script: s.yaml}\n"+extra+"\n"), 0o644))
		f, err := spec.Load(p, nil)
		require.NoError(t, err, extra)
		_, err = f.Build(spec.Deps{Workspace: dir})
		assert.ErrorContains(t, err, want, extra)
	}
}
