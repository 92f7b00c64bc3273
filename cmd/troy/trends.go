package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/report"
)

func newTrendsCmd() *cobra.Command {
	var jsonOut bool
	var htmlOut string
	cmd := &cobra.Command{
		Use:   "trends [DIR]",
		Short: "Day by day over logs/<date>/: traces audited, violations by severity and rule, mean and p95 risk, the rules that moved most",
		Long: `Read every DIR/<YYYY-MM-DD>/ folder (DIR defaults to logs, where troy audit and
audit-batch write) and print, per day, the traces audited, the violations by
severity, the mean and 95th-percentile risk score, and the rules whose rate
(violations per trace) moved most on the latest day against the days before.
Folders that are not days, or hold no audit, are listed as skipped.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "logs"
			if len(args) == 1 {
				dir = args[0]
			}
			t, err := report.LoadTrends(dir)
			if err != nil {
				return codeError{exitError, err}
			}
			if htmlOut != "" {
				page, err := report.TrendsHTML(t)
				if err == nil {
					err = report.WriteFileAtomic(htmlOut, page, report.DefaultModes)
				}
				if err != nil {
					return codeError{exitError, fmt.Errorf("--html: %w", err)}
				}
			}
			if jsonOut {
				return printJSON(cmd, t)
			}
			t.WriteText(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the trends as JSON")
	cmd.Flags().StringVar(&htmlOut, "html", "", "also write a self-contained page with the table and an SVG chart of violations and risk per day")
	return cmd
}
