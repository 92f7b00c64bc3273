package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/transparency-dev/formats/log"

	"github.com/troy-audit/troy/pkg/ledger"
)

func newLedgerCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Read and verify the decision ledger"}
	show := &cobra.Command{
		Use:   "show LEDGER_ID",
		Short: "Print a ledger's records (a run id or a trace id)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ledger.ValidID(args[0]); err != nil {
				return codeError{exitError, err}
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
	var checkpointFile, pubkey string
	verify := &cobra.Command{
		Use:   "verify [LEDGER_ID | --all] [--pubkey FILE [--checkpoint FILE]]",
		Short: "Check ledgers' chains (canonical records, contiguous sequence, every link) and, with --pubkey, the log against a signed checkpoint",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0) == !all {
				return codeError{exitError, errors.New("name one ledger, or --all")}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				if pubkey != "" {
					v, err := ledger.LoadVerifier(pubkey)
					if err != nil {
						return err
					}
					var cp []byte
					if checkpointFile != "" {
						if cp, err = os.ReadFile(checkpointFile); err != nil {
							return err
						}
					} else if cp, err = ledger.LatestCheckpoint(ctx, st.js); err != nil {
						return err
					}
					entries, err := ledger.ReadAll(ctx, st.js)
					if err == nil {
						var c *log.Checkpoint
						if c, err = ledger.CheckAgainst(cp, v, entries); err == nil {
							fmt.Fprintf(cmd.OutOrStdout(), "log: ok, %d entries, consistent with the checkpoint of %d signed by %s\n", len(entries), c.Size, v.Name())
						}
					}
					if err != nil {
						fmt.Fprintf(cmd.OutOrStdout(), "log: FAULT %v\n", err)
						return codeError{exitViolation, errors.New("the log does not match its signed checkpoint")}
					}
				}
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
	verify.Flags().StringVar(&pubkey, "pubkey", "", "the checkpoint signer's public key (file or value): also check the whole log against a signed checkpoint")
	verify.Flags().StringVar(&checkpointFile, "checkpoint", "", "a checkpoint kept elsewhere (default: the newest stored one)")

	var name, out string
	keygen := &cobra.Command{
		Use:   "keygen --name NAME -o FILE",
		Short: "Make an Ed25519 key for signing checkpoints (private key to FILE, public key on stdout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || out == "" {
				return codeError{exitError, errors.New("keygen needs --name and -o FILE")}
			}
			sk, vk, err := ledger.GenerateKey(name)
			if err != nil {
				return err
			}
			if err := os.WriteFile(out, []byte(sk+"\n"), 0o600); err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), vk)
			return nil
		},
	}
	keygen.Flags().StringVar(&name, "name", "", "the log's name in its checkpoints")
	keygen.Flags().StringVarP(&out, "output", "o", "", "where the private key goes (written 0600)")

	var key string
	checkpoint := &cobra.Command{
		Use:   "checkpoint [export] [--key FILE]",
		Short: "Sign and store a checkpoint of the whole log (or, with export, print the newest one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			export := len(args) == 1 && args[0] == "export"
			if len(args) == 1 && !export {
				return codeError{exitError, fmt.Errorf("%q: the only word checkpoint takes is export", args[0])}
			}
			if key == "" {
				key = os.Getenv("TROY_LEDGER_KEY")
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				if export {
					cp, err := ledger.LatestCheckpoint(ctx, st.js)
					if err != nil {
						return err
					}
					_, err = cmd.OutOrStdout().Write(cp)
					return err
				}
				if key == "" {
					return errors.New("checkpoint needs --key FILE (or TROY_LEDGER_KEY): troy ledger keygen makes one")
				}
				s, err := ledger.LoadSigner(key)
				if err != nil {
					return err
				}
				cp, err := ledger.PublishCheckpoint(ctx, st.js, s)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(cp)
				return err
			})
		},
	}
	checkpoint.Flags().StringVar(&key, "key", "", "the private key file (env TROY_LEDGER_KEY: the key itself)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the ledgers (agent runs, guard and reporter processes) with their record counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				counts, err := ledgerCounts(ctx, st.js)
				if err != nil {
					return err
				}
				ids := make([]string, 0, len(counts))
				for id := range counts {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				for _, id := range ids {
					fmt.Fprintf(cmd.OutOrStdout(), "%-48s %d\n", id, counts[id])
				}
				return nil
			})
		},
	}
	cmd.AddCommand(list, show, verify, keygen, checkpoint)
	return cmd
}

// ledgerIDs lists the ledgers in the stream.
func ledgerIDs(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	counts, err := ledgerCounts(ctx, js)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// ledgerCounts is each ledger's number of records.
func ledgerCounts(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	s, err := js.Stream(ctx, ledger.Stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("troy.ledger.>"))
	if err != nil {
		return nil, err
	}
	counts := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		counts[strings.TrimPrefix(subj, "troy.ledger.")] = n
	}
	return counts, nil
}
