// Package templates holds the bundled policies (minimal, agent_safety,
// owasp_llm_top10, data_protection, safe_browsing, soc2, hipaa), embedded in
// the binary, and merges them.
package templates

import (
	"embed"
	"fmt"
	"sort"
	"strings"

	"github.com/troy-audit/troy/pkg/policy"
)

//go:embed *.yaml
var files embed.FS

// Names lists the bundled templates.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Source returns a template's YAML as shipped.
func Source(name string) ([]byte, error) {
	b, err := files.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no template %q: choose one of %s", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Load parses a template.
func Load(name string) (*policy.Policy, error) {
	b, err := Source(name)
	if err != nil {
		return nil, err
	}
	p, err := policy.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return p, nil
}

// Merge combines templates into one policy. A rule id used by more than one
// keeps its id in the first and is prefixed with its template's name after
// that, so every rule id stays unique.
func Merge(id string, names ...string) (*policy.Policy, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no templates to merge: name at least one of %s", strings.Join(Names(), ", "))
	}
	out := &policy.Policy{PolicyID: id}
	seen := map[string]bool{}
	var descs []string
	for _, n := range names {
		p, err := Load(n)
		if err != nil {
			return nil, err
		}
		descs = append(descs, n)
		for _, r := range p.Rules {
			if seen[r.RuleID] {
				r.RuleID = n + "." + r.RuleID
			}
			seen[r.RuleID] = true
			out.Rules = append(out.Rules, r)
		}
	}
	out.Description = "Merged from the templates " + strings.Join(descs, ", ") + "."
	return out, nil
}
