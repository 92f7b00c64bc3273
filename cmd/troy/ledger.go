package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/ledger"
)

func newLedgerCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Read and verify the decision ledger"}
	show := &cobra.Command{
		Use:   "show LEDGER_ID",
		Short: "Print a ledger's records (a run id or a trace id)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !agentrun.ValidID(args[0]) {
				return codeError{exitError, fmt.Errorf("ledger id %q: use a run or trace id", args[0])}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				entries, err := ledger.Read(ctx, st.js, args[0])
				if err != nil {
					return err
				}
				if len(entries) == 0 {
					return fmt.Errorf("ledger %s has no records", args[0])
				}
				for _, e := range entries {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", ledger.EntryHash(e)[:12], e)
				}
				return nil
			})
		},
	}
	var all bool
	verify := &cobra.Command{
		Use:   "verify [LEDGER_ID | --all]",
		Short: "Check ledgers' chains: canonical records, contiguous sequence, every link",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0) == !all {
				return codeError{exitError, errors.New("name one ledger, or --all")}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				ids := args
				if all {
					var err error
					if ids, err = ledgerIDs(ctx, st.js); err != nil {
						return err
					}
				}
				bad := 0
				for _, id := range ids {
					entries, err := ledger.Read(ctx, st.js, id)
					if err != nil {
						return err
					}
					head, err := ledger.Verify(entries)
					if err != nil {
						bad++
						fmt.Fprintf(cmd.OutOrStdout(), "%s: FAULT %v\n", id, err)
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d records, head %s\n", id, len(entries), head)
				}
				if bad > 0 {
					return codeError{exitViolation, fmt.Errorf("%d of %d ledgers have faults", bad, len(ids))}
				}
				return nil
			})
		},
	}
	verify.Flags().BoolVar(&all, "all", false, "every ledger")
	cmd.AddCommand(show, verify)
	return cmd
}

// ledgerIDs lists the ledgers in the stream.
func ledgerIDs(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	s, err := js.Stream(ctx, ledger.Stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("troy.ledger.>"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for subj := range info.State.Subjects {
		ids = append(ids, strings.TrimPrefix(subj, "troy.ledger."))
	}
	sort.Strings(ids)
	return ids, nil
}
