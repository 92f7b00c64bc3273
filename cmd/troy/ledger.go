package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/ledger"
)

func newLedgerCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Read and verify the decision ledger"}
	show := &cobra.Command{
		Use:   "show LEDGER_ID",
		Short: "Print a ledger's records: entry number in the log, entry hash, record",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ledger.ValidID(args[0]); err != nil {
				return codeError{exitError, err}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				entries, err := ledger.ReadStored(ctx, st.js, args[0])
				if err != nil {
					return err
				}
				if len(entries) == 0 {
					return fmt.Errorf("ledger %s has no records", args[0])
				}
				for _, e := range entries { // entry number (for troy ledger proof), hash, record
					fmt.Fprintf(cmd.OutOrStdout(), "%d %s %s\n", e.StreamSeq, ledger.EntryHash(e.Data)[:12], e.Data)
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
					var cps [][]byte
					if checkpointFile != "" {
						cp, err := os.ReadFile(checkpointFile)
						if err != nil {
							return err
						}
						cps = [][]byte{cp}
					} else if cps, err = ledger.Checkpoints(ctx, st.js); err != nil {
						return err
					} else if len(cps) == 0 {
						return errors.New("no checkpoint is stored yet: sign one (troy ledger checkpoint --key FILE) or run the checkpointer (troy serve with TROY_LEDGER_KEY)")
					}
					stored, err := ledger.ReadAll(ctx, st.js)
					if err == nil {
						var res ledger.Checked
						if res, err = ledger.CheckAll(cps, v, ledger.Leaves(stored)); err == nil {
							fmt.Fprintf(cmd.OutOrStdout(), "log: ok, %d entries, consistent with %s signed by %s (the newest covers %d)\n",
								len(stored), plural(res.Checkpoints, "checkpoint", "checkpoints"), v.Name(), res.Size)
						}
						if res.Ignored > 0 {
							fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s not signed by %s and ignored: forged, or signed with another key\n", plural(res.Ignored, "stored checkpoint is", "stored checkpoints are"), v.Name())
						}
					}
					if err != nil {
						fmt.Fprintf(cmd.OutOrStdout(), "log: FAULT %v\n", err)
						return codeError{exitViolation, errors.New("the log does not match its signed checkpoints")}
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
					if len(entries) == 0 && !all {
						// a mistyped id must not "verify"
						return codeError{exitError, fmt.Errorf("no ledger %s: it has no records (troy ledger list shows them)", id)}
					}
					head, err := ledger.Verify(id, entries)
					if err != nil {
						bad++
						fmt.Fprintf(cmd.OutOrStdout(), "%s: FAULT %v\n", id, err)
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok, %d records, head %s\n", id, len(entries), head)
				}
				if all && len(ids) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no ledgers yet")
				}
				if pubkey == "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "troy: chains checked; the log was not checked against a signed checkpoint (give --pubkey for that)")
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
	verify.Flags().StringVar(&checkpointFile, "checkpoint", "", "a checkpoint kept elsewhere (default: every stored one)")

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
				if len(counts) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "no ledgers yet: agent runs, guards with --ledger and the reporter write them")
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-48s %s\n", "LEDGER", "RECORDS")
				for _, id := range slices.Sorted(maps.Keys(counts)) {
					fmt.Fprintf(cmd.OutOrStdout(), "%-48s %d\n", id, counts[id])
				}
				return nil
			})
		},
	}
	var proofCheckpoint string
	prove := &cobra.Command{
		Use:   "proof ENTRY_SEQ [--checkpoint FILE] > proof.json",
		Short: "Print the proof that one entry (its LEDGER stream sequence) is in the log the newest checkpoint signed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || seq == 0 {
				return codeError{exitError, fmt.Errorf("ENTRY_SEQ %q: the entry's stream sequence, a number from 1 (troy ledger show prints them)", args[0])}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				var cp []byte
				if proofCheckpoint != "" {
					cp, err = os.ReadFile(proofCheckpoint)
				} else {
					cp, err = ledger.LatestCheckpoint(ctx, st.js)
				}
				if err != nil {
					return err
				}
				stored, err := ledger.ReadAll(ctx, st.js)
				if err != nil {
					return err
				}
				if last := len(stored); last == 0 || seq > stored[last-1].StreamSeq {
					return codeError{exitError, fmt.Errorf("no entry %d: the log has %s (troy ledger show LEDGER_ID prints entry numbers)", seq, plural(last, "entry", "entries"))}
				}
				p, err := ledger.Prove(stored, seq, cp)
				if err != nil {
					return err
				}
				out, _ := json.MarshalIndent(p, "", "  ")
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return nil
			})
		},
	}
	prove.Flags().StringVar(&proofCheckpoint, "checkpoint", "", "prove against this checkpoint (default: the newest stored one)")

	var vpCheckpoint, vpPubkey string
	verifyProof := &cobra.Command{
		Use:   "verify-proof proof.json --pubkey FILE [--checkpoint FILE]",
		Short: "Check a proof offline: the checkpoint's signature and that the entry hashes up to its root (no server needed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if vpPubkey == "" {
				return codeError{exitError, errors.New("verify-proof needs --pubkey: the checkpoint signer's public key")}
			}
			v, err := ledger.LoadVerifier(vpPubkey)
			if err != nil {
				return codeError{exitError, err}
			}
			b, err := os.ReadFile(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			var p ledger.Proof
			if err := json.Unmarshal(b, &p); err != nil {
				return codeError{exitError, fmt.Errorf("%s: not a proof (troy ledger proof makes one): %w", args[0], err)}
			}
			if vpCheckpoint != "" { // the checkpoint the verifier trusts, not the one the proof came with
				cp, err := os.ReadFile(vpCheckpoint)
				if err != nil {
					return codeError{exitError, err}
				}
				p.Checkpoint = string(cp)
			}
			rec, err := ledger.VerifyProof(&p, v)
			if err != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "proof: FAULT %v\n", err)
				return codeError{exitViolation, errors.New("the proof does not hold")}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "proof: ok, entry %d (ledger %s, seq %d, %s) is in the log of %d entries signed by %s\n",
				p.Seq, rec.Ledger, rec.Seq, rec.Kind, p.TreeSize, v.Name())
			return nil
		},
	}
	verifyProof.Flags().StringVar(&vpPubkey, "pubkey", "", "the checkpoint signer's public key (file or value)")
	verifyProof.Flags().StringVar(&vpCheckpoint, "checkpoint", "", "a checkpoint obtained independently, to check the proof against (default: the one in the proof)")
	digest := &cobra.Command{
		Use:   "digest FILE",
		Short: "Print the SHA-256 of a JSON file's RFC 8785 form, as the ledger records it (audit.json → audit_sha256)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			d, err := ledger.DigestJSON(b)
			if err != nil {
				return codeError{exitError, fmt.Errorf("%s: %w", args[0], err)}
			}
			fmt.Fprintln(cmd.OutOrStdout(), d)
			return nil
		},
	}
	cmd.AddCommand(list, show, verify, prove, verifyProof, digest, keygen, checkpoint)
	return cmd
}

// ledgerIDs lists the ledgers in the stream.
func ledgerIDs(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	counts, err := ledgerCounts(ctx, js)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(counts)), nil
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
