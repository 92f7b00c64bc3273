package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/httpauth"
)

func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Bearer tokens for troy serve's HTTP API (--http-tokens)"}
	var file string
	var scopes []string
	add := &cobra.Command{
		Use:   "add NAME --scope S [--scope S…] [--file FILE]",
		Short: "Make a token: its hash goes to FILE, the token itself to the last line of stdout, once",
		Long: `Make a bearer token for troy serve's HTTP API. Only its SHA-256 is kept, in
FILE (made 0600); the token is printed once, as the last line of stdout: store it
where the client reads it. Scopes: ingest (send traces and steps), guard (ask
the guard), read (/metrics), approve (decide approvals), admin (all). A
running troy serve follows the file: a token added or removed counts within a
second. Revoke one with troy tokens remove NAME.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(scopes) == 0 {
				return codeError{exitError, fmt.Errorf("give --scope: one or more of %s", strings.Join(httpauth.Scopes, ", "))}
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				return codeError{exitError, err}
			}
			secret, err := httpauth.Append(file, args[0], scopes)
			if err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %q (%s) added to %s; it is shown once:\n", args[0], strings.Join(scopes, ","), file)
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			return nil
		},
	}
	add.Flags().StringSliceVar(&scopes, "scope", nil, "what the token may do: "+strings.Join(httpauth.Scopes, ", ")+" (repeat, or comma-separate)")
	list := &cobra.Command{
		Use:   "list [--file FILE]",
		Short: "List the tokens' names and scopes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := httpauth.Load(file)
			if err != nil {
				return codeError{exitError, err}
			}
			for _, t := range ts.Names() {
				fmt.Fprintf(cmd.OutOrStdout(), "%-24s %s\n", t.Name, strings.Join(t.Scopes, ","))
			}
			return nil
		},
	}
	remove := &cobra.Command{
		Use:   "remove NAME [--file FILE]",
		Short: "Revoke a token: a running troy serve stops taking it within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			left, err := httpauth.Remove(file, args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %q removed from %s\n", args[0], file)
			if left == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "troy: that was the last token: troy serve now refuses every client (fail closed) until one is added")
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{add, list, remove} {
		c.Flags().StringVar(&file, "file", envOr("TROY_HTTP_TOKENS", defaultTokensFile), "the tokens file (env TROY_HTTP_TOKENS)")
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}
