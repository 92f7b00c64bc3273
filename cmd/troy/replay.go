package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/replayui"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/trace"
)

func newReplayCmd(g *globalFlags) *cobra.Command {
	var policyPath, comparePath string
	var noInteractive, jsonOut bool
	cmd := &cobra.Command{
		Use:   "replay AUDIT_JSON|TRACE|RUN_ID [--policy P] [--compare-policy Q] [--no-interactive]",
		Short: "Step through a trace in the terminal: its steps, what each policy flags on them, why each step ran",
		Long: `Open a stored audit (audit.json) or a trace file in a terminal viewer: the
steps beside the selected step's detail (type, name, input, output, metadata,
explanation, the rules that fired on it), violation steps marked by severity.
Keys: ↑↓ move, n/N next/previous violation, tab switch policy, / search,
f filter by rule id or step type, e expand JSON, q quit.

An audit shows its recorded verdict; --policy P and --compare-policy Q add
those policies' verdicts on the same trace (evaluated here, no LLM), and tab
switches between them, marking what each adds or drops against the first.
A trace file needs --policy. An agent run id (troy agent run prints it)
finds that run's audit on the bus (--nats-url, default nats://127.0.0.1:4222).
--no-interactive, or a stdout that is not a
terminal, prints the steps instead (with the difference when two policies
are given).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				hint := filepath.Join(args[0], "<trace_id>", "audit.json")
				return codeError{exitError, fmt.Errorf("%s is a folder: replay one audit in it (%s), a trace file, or an agent run id", args[0], hint)}
			}
			data, err := os.ReadFile(args[0])
			if errors.Is(err, fs.ErrNotExist) && agentrun.ValidID(args[0]) {
				data, err = fetchRunAudit(cmd, g, args[0])
			}
			if err != nil {
				return codeError{exitError, err}
			}
			a, sides, err := replayInput(args[0], data, policyPath, comparePath)
			if err != nil {
				return codeError{exitError, err}
			}
			last := sides[len(sides)-1]
			if jsonOut {
				if len(sides) == 1 {
					return printJSON(cmd, a)
				}
				return printJSON(cmd, map[string]any{"trace_id": a.Trace.TraceID, "policy_before": sides[0].Name, "policy_after": last.Name,
					"risk_before": sides[0].Risk, "risk_after": last.Risk, "diff": report.Compare(sides[0].Violations, last.Violations),
					"rule_errors": last.RuleErrors})
			}
			if !noInteractive && isTerminal(cmd.OutOrStdout()) {
				_, err := tea.NewProgram(replayui.New(a, sides), tea.WithInput(cmd.InOrStdin()), tea.WithOutput(cmd.OutOrStdout())).Run()
				return err
			}
			if len(sides) == 1 {
				report.Replay(cmd.OutOrStdout(), a, nil)
				return nil
			}
			diff := report.Compare(sides[0].Violations, last.Violations)
			report.Replay(cmd.OutOrStdout(), a, &diff)
			fmt.Fprintf(cmd.OutOrStdout(), "risk %d → %d under %s\n", sides[0].Risk, last.Risk, last.Name)
			for _, re := range last.RuleErrors {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: rule %s failed on step %s: %s\n", re.RuleID, re.StepID, re.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "evaluate the trace with this policy (an audit: and compare with its recorded verdict)")
	cmd.Flags().StringVar(&comparePath, "compare-policy", "", "and with this one, to switch to (tab) and compare")
	cmd.Flags().BoolVar(&noInteractive, "no-interactive", false, "print instead of opening the viewer")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print machine-readable output")
	return cmd
}

// replayInput reads an audit.json or a trace file and the verdicts to show
// on it: the audit's recorded one first, then each policy given.
func replayInput(path string, data []byte, policyPath, comparePath string) (*report.Audit, []replayui.Side, error) {
	var a report.Audit
	var sides []replayui.Side
	if recorded, err := report.DecodeAudit(data, path); err == nil && recorded.SchemaVersion != "" && len(recorded.Trace.Steps) > 0 {
		a = *recorded
		rules := map[string]string{}
		for _, v := range a.Violations {
			rules[v.RuleID] = v.Description
		}
		sides = append(sides, replayui.Side{Name: "recorded " + a.PolicyID + " " + report.ShortHash(a.PolicyHash),
			Violations: a.Violations, RuleErrors: a.RuleErrors, Risk: a.RiskScore, Rules: rules})
	} else {
		t, terr := trace.ParseAny(data, trace.DefaultLimits(), trace.FormatAuto, filepath.Base(path))
		if terr != nil {
			return nil, nil, fmt.Errorf("%s is neither an audit.json (troy audit writes one) nor a trace: %w", path, terr)
		}
		if policyPath == "" && comparePath == "" {
			return nil, nil, errors.New("a trace file needs --policy: which rules to show on it")
		}
		g := execgraph.Build(t)
		ex := explain.Heuristic(t, g)
		a = report.Audit{SchemaVersion: report.SchemaVersion, Trace: t, Graph: g, Explanations: ex.Steps, Summary: ex.Summary,
			ExplanationSource: ex.Source}
	}
	for _, p := range []string{policyPath, comparePath} {
		if p == "" {
			continue
		}
		e, err := loadPolicy(p)
		if err != nil {
			return nil, nil, err
		}
		res := e.Evaluate(a.Trace)
		sc := score.Compute(res.Violations)
		sides = append(sides, replayui.Side{Name: e.Policy().PolicyID + " " + report.ShortHash(e.Hash()), Violations: res.Violations,
			RuleErrors: res.RuleErrors, Risk: sc.RiskScore, Rules: ruleDescriptions(e.Policy())})
	}
	if a.PolicyID == "" { // a trace: the audit shown is the first policy's
		first := sides[0]
		a.PolicyID, a.Violations, a.RuleErrors, a.RiskScore = first.Name, first.Violations, first.RuleErrors, first.Risk
		a.SeverityCounts = score.Compute(first.Violations).SeverityCounts
	}
	return &a, sides, nil
}

// fetchRunAudit fetches an agent run's audit from the bus, as audit.json.
func fetchRunAudit(cmd *cobra.Command, g *globalFlags, runID string) ([]byte, error) {
	var out []byte
	// where agent runs leave their audits: a running troy, or the store
	// troy agent run keeps (see withBus)
	err := withBus(cmd, g, func(ctx context.Context, st *stack) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		rep, err := agentrun.FindReport(ctx, st.js, runID)
		if err != nil {
			return err
		}
		out, err = report.MarshalAudit(rep.Audit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s is not a file, and as a run id: %w", runID, err)
	}
	return out, nil
}

func ruleDescriptions(p *policy.Policy) map[string]string {
	out := map[string]string{}
	for _, r := range p.Rules {
		out[r.RuleID] = r.Description
	}
	return out
}

func printJSON(cmd *cobra.Command, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return nil
}
