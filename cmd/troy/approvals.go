package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/httpauth"
)

func newApprovalsCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "approvals", Short: "Decide the agent calls waiting for a person (approver type nats)"}
	var all, jsonOut, watch bool
	list := &cobra.Command{
		Use:   "list [--all] [--watch] [--json]",
		Short: "List the approvals waiting (with --all, decided ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withServerBus(cmd, g, func(ctx context.Context, st *stack) error {
				a, err := agentrun.OpenApprovals(ctx, st.js)
				if err != nil {
					return err
				}
				shown := map[string]string{}
				for {
					items, err := a.List(ctx, all)
					if err != nil {
						return err
					}
					printApprovals(cmd, items, jsonOut, shown)
					if !watch {
						return nil
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(time.Second):
					}
				}
			})
		},
	}
	list.Flags().BoolVar(&all, "all", false, "decided and expired approvals too")
	list.Flags().BoolVar(&jsonOut, "json", false, "one JSON object per approval")
	list.Flags().BoolVar(&watch, "watch", false, "keep printing new approvals until interrupted")
	cmd.AddCommand(list, decideCmd(g, true), decideCmd(g, false))
	return cmd
}

// printApprovals prints the approvals not printed before in this state.
func printApprovals(cmd *cobra.Command, items []agentrun.Approval, jsonOut bool, shown map[string]string) {
	out := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := len(shown) == 0
	n := 0
	for _, a := range items {
		if shown[a.ID] == a.Status {
			continue
		}
		shown[a.ID] = a.Status
		n++
		if jsonOut {
			b, _ := json.Marshal(a)
			fmt.Fprintln(out, string(b))
			continue
		}
		if header {
			fmt.Fprintln(tw, "ID\tSTATUS\tTIER\tTOOL\tRUN\tWAITED\tWHY")
			header = false
		}
		why := a.Request.Rationale
		if a.Status != agentrun.Pending {
			why = a.By + ": " + a.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, a.Request.Tier, a.Request.Tool, a.Request.RunID,
			time.Since(a.CreatedAt).Round(time.Second), clipLine(why, 70))
	}
	tw.Flush()
	if n == 0 && len(shown) == 0 && !jsonOut {
		fmt.Fprintln(out, "no approvals waiting")
	}
}

func decideCmd(g *globalFlags, approve bool) *cobra.Command {
	var reason, by string
	name, short := "deny", "Deny a waiting call"
	if approve {
		name, short = "approve", "Approve a waiting call"
	}
	cmd := &cobra.Command{
		Use:   name + " APPROVAL_ID [--reason \"…\"] [--by NAME]",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !approve && reason == "" {
				return codeError{exitError, errors.New("deny needs --reason: the agent reads it")}
			}
			if by == "" {
				by = os.Getenv("USER")
			}
			return withServerBus(cmd, g, func(ctx context.Context, st *stack) error {
				a, err := agentrun.OpenApprovals(ctx, st.js)
				if err != nil {
					return err
				}
				rec, err := a.Decide(ctx, args[0], approve, by, reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s call to %s in run %s %s by %s\n", rec.ID, rec.Request.Tier, rec.Request.Tool, rec.Request.RunID, rec.Status, rec.By)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (the agent reads it)")
	cmd.Flags().StringVar(&by, "by", "", "who decides (default $USER)")
	return cmd
}

// approvalHandler serves POST /v1/approvals/{id} with {"approved": bool,
// "reason": "…", "by": "…"}: 200 with the decided approval, 404 unknown,
// 409 already decided, 400 a body that decides nothing.
func approvalHandler(a *agentrun.Approvals) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Approved *bool  `json:"approved"`
			Reason   string `json:"reason"`
			By       string `json:"by"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Approved == nil {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"approved": true|false, "reason": "…", "by": "…"}`})
			return
		}
		if !*body.Approved && body.Reason == "" {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": "a denial needs a reason: the agent reads it"})
			return
		}
		// who decided: the token the request came in with, which a client
		// cannot claim otherwise; its own "by" is kept beside it
		by := body.By
		if by == "" {
			by = "http"
		}
		if name := httpauth.TokenName(r.Context()); name != "" && name != body.By {
			by = "token " + name
			if body.By != "" {
				by += " (" + body.By + ")"
			}
		}
		rec, err := a.Decide(r.Context(), r.PathValue("id"), *body.Approved, by, body.Reason)
		var done *agentrun.AlreadyDecided
		switch {
		case errors.As(err, &done):
			httpJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "approval": done.Approval})
		case errors.Is(err, agentrun.ErrNoApproval):
			httpJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		default:
			httpJSON(w, http.StatusOK, rec)
		}
	})
}

func httpJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
