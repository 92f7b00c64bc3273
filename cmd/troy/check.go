package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/ledger"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

func newCheckCmd(g *globalFlags) *cobra.Command {
	var action, input, metadata, typ, history, mode, agentName, session, ledgerURL string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check POLICY -a ACTION",
		Short: "Check one proposed action against a policy before it runs: allow or block",
		Long: `Check one proposed action against a policy, in process, and print the
decision as JSON: {"decision": "allow"|"block", "violations": […], "policy_hash": …}.

--history gives the steps that came before (a trace file, or a JSON list of
steps), so rules such as any_prev see them. Exit code: 0 allowed, 2 blocked
(enforce mode), 1 usage or input error. --mode monitor always allows and still
reports the violations. A rule that cannot be evaluated on the action blocks
it (unless the rule or policy says on_error: allow).

With --nats-url, the check is made by the guard of a running troy serve: POLICY
is then a policy id or sha256: hash it has stored (troy policies push), or a
policy file whose exact version it has stored, and --session names the session
whose allowed actions count as history. An unreachable guard blocks.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("timeout") && g.natsURL == "" {
				return codeError{exitError, errors.New("--timeout bounds a check by a running troy's guard (with --nats-url); in process there is nothing to wait for")}
			}
			if ledgerURL != "" && g.natsURL != "" {
				return codeError{exitError, errors.New("--ledger is for in-process checks: with --nats-url, the guard of troy serve records its decisions (its --ledger)")}
			}
			if action == "" && typ == trace.TypeToolCall {
				return codeError{exitError, errors.New("name the action to check: -a TOOL (the tool the agent wants to call)")}
			}
			req := guard.Request{Mode: mode, SessionID: session, Action: guard.Action{Type: typ, Name: action}, Agent: guard.Agent{Name: agentName}}
			if input != "" {
				if err := json.Unmarshal([]byte(input), &req.Action.Input); err != nil {
					return codeError{exitError, fmt.Errorf("--input is not JSON: %w (quote it: -i '{\"cmd\": \"ls\"}')", err)}
				}
			}
			if metadata != "" {
				if err := json.Unmarshal([]byte(metadata), &req.Action.Metadata); err != nil {
					return codeError{exitError, fmt.Errorf("--metadata must be a JSON object: %w", err)}
				}
			}
			if history != "" {
				steps, agentMeta, err := readHistory(history)
				if err != nil {
					return codeError{exitError, err}
				}
				req.History = steps
				if req.Agent.Metadata == nil {
					req.Agent.Metadata = agentMeta
				}
			}
			var checker guard.Guard
			if g.natsURL != "" {
				ref, err := remotePolicyRef(args[0])
				if err != nil {
					return codeError{exitError, err}
				}
				req.Policy = ref
				nc, err := bus.Connect(g.client("troy-check"))
				if err != nil {
					// an unreachable guard blocks, as the SDKs' clients do
					d := guard.Decision{Decision: guard.Block, Mode: req.Mode, Violations: []policy.Violation{}, Reason: "the guard cannot be reached: " + err.Error()}
					return printDecision(cmd, d)
				}
				defer nc.Close()
				checker = &guard.NATS{Conn: nc, Opts: guard.RemoteOptions{Timeout: timeout}}
			} else {
				if session != "" {
					return codeError{exitError, errors.New("--session needs --nats-url: sessions live in the guard of troy serve (in process, pass --history)")}
				}
				engine, err := loadPolicy(args[0])
				if err != nil {
					return codeError{exitError, err}
				}
				local := &guard.Local{Policies: guard.Static{E: engine}}
				if ledgerURL != "" {
					disconnect, err := recordChecks(cmd.Context(), g, ledgerURL, local)
					if err != nil {
						return codeError{exitError, err}
					}
					defer disconnect()
				}
				checker = local
			}
			d, err := checker.Check(cmd.Context(), req)
			if err != nil {
				return codeError{exitError, err}
			}
			return printDecision(cmd, d)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&action, "action", "a", "", "the tool (or model) the agent wants to call")
	fl.StringVarP(&input, "input", "i", "", "the call's input, as JSON")
	fl.StringVar(&metadata, "metadata", "", "the action's metadata, as a JSON object")
	fl.StringVar(&typ, "type", trace.TypeToolCall, "step type: tool_call, llm_call, decision or observation")
	fl.StringVar(&history, "history", "", "earlier steps: a trace file or a JSON list of steps")
	fl.StringVar(&mode, "mode", guard.Enforce, "enforce (block on a violation) or monitor (always allow, still report)")
	fl.StringVar(&agentName, "agent", "", "the agent's name (agent.name in conditions)")
	fl.StringVar(&session, "session", "", "with --nats-url: the session whose allowed actions are the history")
	fl.DurationVar(&timeout, "timeout", 2*time.Second, "with --nats-url: block when the guard does not answer within this")
	fl.StringVar(&ledgerURL, "ledger", "", "record the decision in the decision ledger of the NATS server at this URL (ledger check.<host>); a decision that cannot be recorded blocks")
	return cmd
}

// printDecision prints a decision as JSON; a block exits 2.
func printDecision(cmd *cobra.Command, d guard.Decision) error {
	out, _ := json.MarshalIndent(d, "", "  ")
	fmt.Fprintln(cmd.OutOrStdout(), string(out))
	if d.Decision == guard.Allow {
		return nil
	}
	if d.Reason != "" {
		return codeError{exitViolation, fmt.Errorf("blocked: %s", d.Reason)}
	}
	return codeError{exitViolation, fmt.Errorf("blocked by %s of %s", plural(len(d.Violations), "violation", "violations"), d.PolicyID)}
}

// recordChecks makes local record its decisions on the ledger of the NATS
// server at url, each before it is given; the returned func disconnects.
func recordChecks(ctx context.Context, g *globalFlags, url string, local *guard.Local) (func(), error) {
	cfg := g.client("troy-check")
	cfg.URL = url
	nc, err := bus.Connect(cfg)
	if err != nil {
		return nil, fmt.Errorf("--ledger: %w", err)
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	w, err := ledger.Open(ctx, js, ledger.HostID("check"), "troy check")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("--ledger: %w (is this troy serve's NATS, with the ledger streams?)", err)
	}
	local.Recorder = guard.LedgerRecorder{L: w}
	return nc.Close, nil
}

// remotePolicyRef is what a remote guard is asked to use: a policy file's
// exact version (its hash), or the id or hash given.
func remotePolicyRef(arg string) (string, error) {
	if _, err := os.Stat(arg); err != nil {
		return arg, nil
	}
	e, err := loadPolicy(arg)
	if err != nil {
		return "", err
	}
	return e.Hash(), nil
}

// readHistory reads a canonical trace (its steps and metadata) or a bare list
// of steps, validated like any trace.
func readHistory(path string) ([]*trace.Step, map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--history: %w", err)
	}
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, nil, fmt.Errorf("--history %s: not JSON: %w", path, err)
	}
	if list, ok := probe.([]any); ok { // wrap a bare list as a trace to validate it
		data, _ = json.Marshal(map[string]any{"trace_id": "history", "agent_name": "agent", "steps": list})
	}
	t, err := trace.Parse(data, trace.DefaultLimits())
	var invalid *trace.InvalidError
	if errors.As(err, &invalid) {
		return nil, nil, fmt.Errorf("--history %s: %w", path, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return t.Steps, t.Metadata, nil
}
