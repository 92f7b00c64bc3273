package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/templates"
)

func newPoliciesCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "Bundled policy templates, and lint, import and push of policy files",
	}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List the bundled templates", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "TEMPLATE\tRULES\tDESCRIPTION")
				for _, n := range templates.Names() {
					p, err := templates.Load(n)
					if err != nil {
						return codeError{exitError, err}
					}
					fmt.Fprintf(w, "%s\t%d\t%s\n", n, len(p.Rules), firstSentence(p.Description))
				}
				return w.Flush()
			},
		},
		&cobra.Command{
			Use: "show TEMPLATE", Short: "Print a bundled template", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				src, err := templates.Source(args[0])
				if err != nil {
					return codeError{exitError, err}
				}
				_, err = cmd.OutOrStdout().Write(src)
				return err
			},
		},
		newPoliciesCopyCmd(), newPoliciesInitCmd(), newPoliciesLintCmd(), newPoliciesImportCmd(), newPoliciesPushCmd(g),
	)
	return cmd
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// writeNew writes a file, refusing to replace one unless force is set.
func writeNew(path string, data []byte, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: choose another -o, or pass --force to replace it", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func isJSONPath(path string) bool { return strings.EqualFold(filepath.Ext(path), ".json") }

// encodePolicy writes a policy as its file's extension says: JSON for
// .json, YAML otherwise.
func encodePolicy(path string, p *policy.Policy) ([]byte, error) {
	if isJSONPath(path) {
		b, err := json.MarshalIndent(p, "", "  ")
		return append(b, '\n'), err
	}
	// through JSON so the keys keep the order people read them in
	// (policy_id, rules; rule_id, description, condition, …), not sorted
	js, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	blockStyle(&doc)
	var b bytes.Buffer
	enc := yamlv3.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	// what is written must read back as the same policy
	back, err := policy.Parse(b.Bytes())
	if err != nil || back.Hash() != p.Hash() {
		return nil, fmt.Errorf("the policy does not survive being written as YAML (%v): write it as JSON (-o FILE.json)", err)
	}
	return b.Bytes(), nil
}

// blockStyle turns JSON's flow style into YAML's block style, and strings
// back to plain (or quoted only where YAML needs it).
func blockStyle(n *yamlv3.Node) {
	n.Style &^= yamlv3.FlowStyle | yamlv3.DoubleQuotedStyle
	if policy.YAML11Bool(n) { // yes, on, n…: text to YAML 1.2, a boolean to troy's reader
		n.Style = yamlv3.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

func newPoliciesCopyCmd() *cobra.Command {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use: "copy TEMPLATE -o FILE", Short: "Copy a bundled template to a file to edit", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := templates.Source(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			if isJSONPath(out) { // the extension decides the format (the YAML keeps its comments)
				p, err := policy.Parse(src)
				if err != nil {
					return codeError{exitError, err}
				}
				if src, err = encodePolicy(out, p); err != nil {
					return codeError{exitError, err}
				}
			}
			if err := writeNew(out, src, force); err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "policy.yaml", "file to write")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
	return cmd
}

func newPoliciesInitCmd() *cobra.Command {
	var out, id string
	var names []string
	var force bool
	cmd := &cobra.Command{
		Use:   "init -t TEMPLATE [-t TEMPLATE…] -o FILE",
		Short: "Start a policy from one or more templates, merged with rule ids kept unique",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for i, n := range names {
				if slices.Contains(names[:i], n) {
					return codeError{exitError, fmt.Errorf("-t %s is given twice: each template once", n)}
				}
			}
			p, err := templates.Merge(id, names...)
			if err != nil {
				return codeError{exitError, err}
			}
			if _, err := policy.Compile(p); err != nil {
				return codeError{exitError, err}
			}
			data, err := encodePolicy(out, p)
			if err != nil {
				return codeError{exitError, err}
			}
			if err := writeNew(out, data, force); err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d rules from %s\n", out, len(p.Rules), strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&names, "template", "t", nil, "template to include (repeat)")
	cmd.Flags().StringVarP(&out, "output", "o", "policy.yaml", "file to write")
	cmd.Flags().StringVar(&id, "id", "my-policy", "policy_id of the new policy")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
	return cmd
}

func newPoliciesLintCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lint FILE [FILE…]",
		Short: "Check policies: every problem with its rule id, line and column; exit 1 if any",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, path := range args {
				e, err := loadPolicy(path)
				var pe *policy.Error
				switch {
				case errors.As(err, &pe):
					for _, p := range pe.Problems {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", path, p.String())
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s: %s\n", path, plural(len(pe.Problems), "problem", "problems"))
					bad++
				case err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s: %v\n", path, err)
					bad++
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %s, %s\n", path, plural(len(e.Policy().Rules), "rule", "rules"), e.Hash())
				}
			}
			if bad > 0 {
				return codeError{exitError, nil}
			}
			return nil
		},
	}
}

func newPoliciesImportCmd() *cobra.Command {
	var out string
	var partial, force bool
	cmd := &cobra.Command{
		Use:   "import OLD_POLICY -o FILE",
		Short: "Translate a policy with Python conditions (troy's predecessor's) into troy's language",
		Long: `Translate a policy whose conditions are Python expressions (troy's predecessor's subset:
get, matches, any_step/any_next/any_prev with lambda, s['k'], x.get('k', d),
and/or/not, ==, !=, in, is None, is True/False, str(), len(), json.dumps())
into expr. Rules outside the subset are reported one by one, never guessed;
with any, nothing is written unless --partial.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			p, probs := policy.ImportPython(data)
			if len(probs) > 0 {
				// not Python, but maybe troy's own language already
				if own, err := policy.Parse(data); err == nil {
					if _, err := policy.Compile(own); err == nil {
						return codeError{exitError, fmt.Errorf("%s is already in troy's language (every condition compiles as expr): nothing to import; troy policies lint %s checks it", args[0], args[0])}
					}
				}
			}
			for _, pr := range probs {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s: %s\n", args[0], pr.String())
			}
			if p == nil || (len(probs) > 0 && !partial) || len(p.Rules) == 0 {
				return codeError{exitError, fmt.Errorf("%s not be translated; nothing written (--partial writes the others)", plural(len(probs), "rule could", "rules could"))}
			}
			// what is written must be what lint and load accept
			if _, err := policy.Compile(p); err != nil {
				return codeError{exitError, fmt.Errorf("the translation does not pass lint; nothing written: %w", err)}
			}
			yml, err := encodePolicy(out, p)
			if err != nil {
				return codeError{exitError, err}
			}
			if err := writeNew(out, yml, force); err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s translated\n", out, plural(len(p.Rules), "rule", "rules"))
			if len(probs) > 0 {
				return codeError{exitError, fmt.Errorf("%s left out", plural(len(probs), "rule", "rules"))}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "policy.yaml", "file to write")
	cmd.Flags().BoolVar(&partial, "partial", false, "write the rules that translated even if others did not")
	cmd.Flags().BoolVar(&force, "force", false, "replace the file if it exists")
	return cmd
}

func newPoliciesPushCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "push FILE|TEMPLATE",
		Short: "Publish a policy version to a running troy (--nats-url, NATS_URL, or troy serve's default address): evaluators and guards using its id switch to it without a restart",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := loadPolicy(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			// a running troy's store, never a throwaway embedded one no
			// server would see
			nc, err := connectServer(g, "troy-policies")
			if err != nil {
				return codeError{exitError, err}
			}
			defer nc.Close()
			js, err := bus.JetStream(nc)
			if err != nil {
				return codeError{exitError, err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			store, err := policystore.Open(ctx, js)
			if err != nil {
				return codeError{exitError, err}
			}
			h, err := store.Push(ctx, e.Policy())
			if bus.IsPermissionDenied(err) {
				return codeError{exitError, fmt.Errorf("%w: this NATS user may not write policies; an operator pushes them (troy policies push as the operator user, or troy provision --policy FILE)", err)}
			}
			if err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s as the latest version of %s: %s\n", args[0], e.Policy().PolicyID, h)
			return nil
		},
	}
}
