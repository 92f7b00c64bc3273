package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
)

func newDiffCmd() *cobra.Command {
	var failOnNew string
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Compare two audits or two batch folders: violations new, fixed and unchanged, risk moved, traces added or missing",
		Long: `Compare two audits (audit.json files) or two batch folders (what troy audit-batch
writes): a violation is a trace, a rule and a step, and is new, fixed or
unchanged; traces are matched by id, and those only in one are added or
missing. For CI: --fail-on-new high exits 2 when the new side introduced a
violation at or above high ("this agent change introduced two new critical
findings").`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if failOnNew != "" && policy.SeverityRank(failOnNew) == 0 {
				return codeError{exitError, fmt.Errorf("--fail-on-new %q: want one of critical, high, medium, low", failOnNew)}
			}
			old, err := report.LoadFindings(args[0])
			if err != nil {
				return codeError{exitError, fmt.Errorf("OLD: %w", err)}
			}
			cur, err := report.LoadFindings(args[1])
			if err != nil {
				return codeError{exitError, fmt.Errorf("NEW: %w", err)}
			}
			r := report.DiffRuns(args[0], old, args[1], cur)
			if jsonOut {
				if err := printJSON(cmd, r); err != nil {
					return err
				}
			} else {
				r.WriteText(cmd.OutOrStdout())
			}
			if failOnNew != "" {
				if r.Matched == 0 && len(old) > 0 && len(cur) > 0 { // a gate that compared nothing must not pass
					return codeError{exitError, fmt.Errorf("no trace of %s is in %s (traces are matched by trace_id): nothing to compare, so --fail-on-new cannot pass", args[0], args[1])}
				}
				if n := r.NewAtOrAbove(failOnNew); n > 0 {
					return codeError{exitViolation, fmt.Errorf("%s at or above %s (--fail-on-new %s)", plural(n, "new violation", "new violations"), failOnNew, failOnNew)}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&failOnNew, "fail-on-new", "", "exit 2 when a new violation at or above this severity appears (critical, high, medium, low)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the diff as JSON")
	return cmd
}
