package spec_test

import (
	"testing"

	"github.com/troy-audit/troy/pkg/agent/spec"
)

// FuzzParse: any config document is accepted or refused with problems;
// never a panic, never accepted without a name and a provider.
func FuzzParse(f *testing.F) {
	f.Add([]byte("name: x\nllm: {provider: scripted, script: s.yaml}\n"))
	f.Add([]byte(`{"name": "x", "llm": {"provider": "openai", "model": "m", "api_key": "${K}"}, "budget": {"max_iterations": 0}}`))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("name: x\nllm: {provider: openai}\ntools: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		file, err := spec.Parse(doc, "fuzz", func(string) (string, bool) { return "v", true })
		if err == nil && (file.Name == "" || file.LLM.Provider == "") {
			t.Fatalf("accepted %q without a name or provider", doc)
		}
	})
}
