package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/trace"
)

func newCheckCmd() *cobra.Command {
	var action, input, metadata, typ, history, mode, agentName string
	cmd := &cobra.Command{
		Use:   "check POLICY -a ACTION",
		Short: "Check one proposed action against a policy before it runs: allow or block",
		Long: `Check one proposed action against a policy, in process, and print the
decision as JSON: {"decision": "allow"|"block", "violations": […], "policy_hash": …}.

--history gives the steps that came before (a trace file, or a JSON list of
steps), so rules such as any_prev see them. Exit code: 0 allowed, 2 blocked
(enforce mode), 1 usage or input error. --mode monitor always allows and still
reports the violations.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			engine, err := loadPolicy(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			req := guard.Request{Mode: mode, Action: guard.Action{Type: typ, Name: action}, Agent: guard.Agent{Name: agentName}}
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
			d, err := (&guard.Local{Policies: guard.Static{E: engine}}).Check(cmd.Context(), req)
			if err != nil {
				return codeError{exitError, err}
			}
			out, _ := json.MarshalIndent(d, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			if d.Decision == guard.Block {
				return codeError{exitViolation, fmt.Errorf("blocked by %d violation(s) of %s", len(d.Violations), d.PolicyID)}
			}
			return nil
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
	return cmd
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
