package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
)

func newReplayCmd() *cobra.Command {
	var policyPath string
	var noInteractive, jsonOut bool
	cmd := &cobra.Command{
		Use:   "replay AUDIT_JSON --no-interactive [--policy FILE]",
		Short: "Walk through an audit step by step; with --policy, see what another policy would flag",
		Long: `Print an audit.json step by step with its explanations and violations.
With --policy, re-evaluate the recorded trace with that policy at once (no LLM)
and mark which violations are new and which are gone.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !noInteractive {
				return codeError{exitError, errors.New("the interactive viewer is not built yet: pass --no-interactive")}
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			var a report.Audit
			if err := json.Unmarshal(data, &a); err != nil || a.Trace == nil || len(a.Trace.Steps) == 0 {
				return codeError{exitError, fmt.Errorf("%s is not an audit.json (troy audit writes one): %v", args[0], err)}
			}
			if policyPath == "" {
				if jsonOut {
					return printJSON(cmd, a)
				}
				report.Replay(cmd.OutOrStdout(), &a, nil)
				return nil
			}
			e, err := loadPolicy(policyPath)
			if err != nil {
				return codeError{exitError, err}
			}
			res := e.Evaluate(a.Trace)
			diff := report.Compare(a.Violations, res.Violations)
			after := score.Compute(res.Violations)
			if jsonOut {
				return printJSON(cmd, map[string]any{"trace_id": a.Trace.TraceID, "policy_before": a.PolicyHash, "policy_after": e.Hash(),
					"risk_before": a.RiskScore, "risk_after": after.RiskScore, "diff": diff, "rule_errors": res.RuleErrors})
			}
			report.Replay(cmd.OutOrStdout(), &a, &diff)
			fmt.Fprintf(cmd.OutOrStdout(), "risk %d → %d under %s (%s)\n", a.RiskScore, after.RiskScore, e.Policy().PolicyID, report.ShortHash(e.Hash()))
			for _, re := range res.RuleErrors {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: rule %s failed on step %s: %s\n", re.RuleID, re.StepID, re.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "re-evaluate with this policy and show what changes")
	cmd.Flags().BoolVar(&noInteractive, "no-interactive", false, "print instead of opening the viewer")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print machine-readable output")
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return nil
}
