package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/templates"
)

// registerCompletions teaches cobra's completion (troy completion bash|zsh|
// fish|powershell) troy's names: template names where a policy goes, and
// rule ids where a rule goes.
func registerCompletions(root *cobra.Command) {
	find := func(path string) *cobra.Command {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil || c == root {
			panic("completions: no command " + path)
		}
		return c
	}
	find("policies show").ValidArgsFunction = argAt(0, completeTemplates)
	find("policies copy").ValidArgsFunction = argAt(0, completeTemplates)
	must(find("policies init").RegisterFlagCompletionFunc("template", completeTemplates))
	find("audit").ValidArgsFunction = argAt(1, completePolicies)
	find("audit-batch").ValidArgsFunction = argAt(1, completePolicies)
	find("check").ValidArgsFunction = argAt(0, completePolicies)
	for _, f := range []struct{ cmd, flag string }{{"serve", "policy"}, {"replay", "policy"}, {"replay", "compare-policy"}, {"mcp-proxy", "policy"}} {
		must(find(f.cmd).RegisterFlagCompletionFunc(f.flag, completePolicies))
	}
	must(find("violations tail").RegisterFlagCompletionFunc("rule", completeRuleIDs))
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

type completer = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective)

// argAt completes the i-th argument with c, earlier ones as files.
func argAt(i int, c completer) completer {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch {
		case len(args) == i:
			return c(cmd, args, toComplete)
		case len(args) < i:
			return nil, cobra.ShellCompDirectiveDefault
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

func completeTemplates(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, n := range templates.Names() {
		if strings.HasPrefix(n, toComplete) {
			p, err := templates.Load(n)
			if err == nil {
				out = append(out, cobra.CompletionWithDesc(n, firstSentence(p.Description)))
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completePolicies offers the templates and the files and folders that
// start with what was typed.
func completePolicies(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	out, _ := completeTemplates(cmd, args, toComplete)
	paths, _ := filepath.Glob(toComplete + "*")
	dir := false
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out, dir = append(out, p+string(filepath.Separator)), true
		} else if ext := filepath.Ext(p); ext == ".yaml" || ext == ".yml" || ext == ".json" {
			out = append(out, p)
		}
	}
	if dir {
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeRuleIDs offers the rule ids of the bundled templates and of the
// policy files in the current folder.
func completeRuleIDs(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var ps []*policy.Policy
	for _, n := range templates.Names() {
		if p, err := templates.Load(n); err == nil {
			ps = append(ps, p)
		}
	}
	for _, pattern := range []string{"*.yaml", "*.yml", "*.json", "examples/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			if p, err := policy.Load(f); err == nil {
				ps = append(ps, p)
			}
		}
	}
	seen := map[string]bool{}
	var out []cobra.Completion
	for _, p := range ps {
		for _, r := range p.Rules {
			if strings.HasPrefix(r.RuleID, toComplete) && !seen[r.RuleID] {
				seen[r.RuleID] = true
				desc := r.Severity
				if d := firstSentence(r.Description); d != "" {
					desc += ": " + d
				}
				out = append(out, cobra.CompletionWithDesc(r.RuleID, desc))
			}
		}
	}
	slices.Sort(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}
