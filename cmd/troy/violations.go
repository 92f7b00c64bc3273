package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
)

// ViolationsStream holds the findings (pipelines/topology.yaml).
const ViolationsStream = pipelines.StreamViolations

func newViolationsCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "violations", Short: "Read the OCSF findings troy publishes for SIEMs"}
	var severity, rule string
	var since time.Duration
	var jsonOut bool
	var limit int
	tail := &cobra.Command{
		Use:   "tail [--severity high] [--rule R] [--since 1h] [--json]",
		Short: "Print violations as they are found (and, with --since, the recent ones first)",
		Long: `Print the findings on troy.violations.<severity>.<rule_id> as they arrive.
--severity keeps that level and above; --since replays the retained ones first.
Without --nats-url it connects to troy serve's default, nats://127.0.0.1:4222.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filters, err := violationFilters(severity, rule)
			if err != nil {
				return codeError{exitError, err}
			}
			nc, err := connectServer(g, "troy-violations-tail")
			if err != nil {
				return codeError{exitError, err}
			}
			defer nc.Close()
			js, err := bus.JetStream(nc)
			if err != nil {
				return codeError{exitError, err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Read by direct gets, not a consumer: a SIEM's user may then
			// only read (it cannot create, change or delete the consumers
			// on this stream, the forwarders' among them).
			filter := filters[0]
			if len(filters) > 1 {
				filter = "troy.violations.>"
			}
			var from bus.DirectFrom
			if since > 0 {
				from.Since = time.Now().Add(-since)
			} else {
				st, err := js.Stream(ctx, ViolationsStream)
				if err != nil {
					return codeError{exitError, fmt.Errorf("read %s: %w (is troy serve running against this server?)", ViolationsStream, err)}
				}
				from.Seq = st.CachedInfo().State.LastSeq + 1
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "troy: following %s on %s (Ctrl-C stops)\n", filter, bus.RedactURL(nc.ConnectedUrlRedacted()))
			var failing time.Time
			for n := 0; limit == 0 || n < limit; {
				batch, next, err := bus.DirectRead(ctx, nc, ViolationsStream, filter, from, 256)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil { // a node going away: try again for a while
					if failing.IsZero() {
						failing = time.Now()
					} else if time.Since(failing) > 30*time.Second {
						return codeError{exitError, err}
					}
				} else {
					failing = time.Time{}
				}
				if next > 0 {
					from = bus.DirectFrom{Seq: next}
				}
				for _, m := range batch {
					if limit > 0 && n >= limit {
						break
					}
					if !slices.ContainsFunc(filters, func(f string) bool { return bus.SubjectMatches(f, m.Subject) }) {
						continue
					}
					n++
					printFinding(cmd, m, jsonOut)
				}
				if len(batch) == 0 || err != nil {
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(250 * time.Millisecond):
					}
				}
			}
			return nil
		},
	}
	fl := tail.Flags()
	fl.StringVar(&severity, "severity", "", "only this severity and above: critical, high, medium or low")
	fl.StringVar(&rule, "rule", "", "only this rule id")
	spanVar(fl, &since, "since", 0, "first replay the findings of this long ago (90m, 12h, 7d, 2w)")
	fl.BoolVar(&jsonOut, "json", false, "print each finding as its OCSF JSON, one per line")
	fl.IntVar(&limit, "limit", 0, "stop after this many findings (0: run until interrupted)")
	cmd.AddCommand(tail)
	return cmd
}

func printFinding(cmd *cobra.Command, m bus.Stored, jsonOut bool) {
	out := cmd.OutOrStdout()
	if jsonOut {
		fmt.Fprintln(out, string(m.Data))
		return
	}
	var f ocsf.Finding
	if err := json.Unmarshal(m.Data, &f); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "troy: skipping a malformed finding on %s: %v\n", m.Subject, err)
		return
	}
	fmt.Fprintf(out, "%s %-8s %s trace=%v step=%v agent=%v  %s\n", time.UnixMilli(f.Time).UTC().Format(time.RFC3339),
		f.Severity, f.FindingInfo.Analytic.UID, f.Unmapped["trace_id"], f.Unmapped["step_id"], f.Unmapped["agent_name"], f.FindingInfo.Desc)
}

// violationFilters turns --severity and --rule into subject filters.
func violationFilters(severity, rule string) ([]string, error) {
	token := "*"
	if rule != "" {
		token = ocsf.SubjectToken(rule)
	}
	if severity == "" {
		return []string{"troy.violations.*." + token}, nil
	}
	floor := policy.SeverityRank(severity)
	if floor == 0 {
		return nil, fmt.Errorf("--severity %q: want one of critical, high, medium, low", severity)
	}
	var out []string
	for _, s := range policy.Severities {
		if policy.SeverityRank(s) >= floor {
			out = append(out, "troy.violations."+s+"."+token)
		}
	}
	return out, nil
}
