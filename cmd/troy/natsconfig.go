package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/natsauth"
)

func newNATSConfigCmd() *cobra.Command {
	var out string
	var fromEnv bool
	var routes []string
	var force bool
	cmd := &cobra.Command{
		Use:   "nats-config --out DIR",
		Short: "Write NATS users for troy: one a service, client roles (audit, siem, guard-client), an operator",
		Long: `Write DIR/auth.conf, a nats-server authorization block (include it in the
server's config, or give it to troy serve --nats-auth), DIR/credentials, each
user's password (0600; auth.conf keeps bcrypt hashes), and DIR/compose.env, the
same as TROY_NATS_PW_<USER>=… for docker compose --env-file, and
DIR/cluster.conf, the routes of a cluster (--routes) and the password a node
logs in with to join (deploy/nats/nats-N.conf include it). With --from-env,
auth.conf reads every password from the server's environment instead (what
deploy/nats/auth.conf is), and no cluster.conf is written.

Each service's user may read its own consumer, publish its own outputs and use
its own buckets, nothing else; services then run with --no-provision, and the
operator runs troy provision. Connect as nats://USER@host:4222 with the
password in TROY_NATS_PASSWORD (out of process lists).

Run it once: a second run makes new passwords, which locks out everyone still
using the old ones, so it refuses to replace the files without --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return codeError{exitError, fmt.Errorf("give --out DIR")}
			}
			topo, err := pipelines.Load()
			if err != nil {
				return err
			}
			users := natsauth.Users(topo)
			passwords := map[string]string{}
			var creds, env strings.Builder
			creds.WriteString("# troy's NATS users and their passwords (troy nats-config). Keep this file secret.\n")
			env.WriteString("# troy's NATS passwords for docker compose --env-file (troy nats-config). Keep this file secret.\n")
			for _, u := range users {
				raw := make([]byte, 24)
				if _, err := rand.Read(raw); err != nil {
					return err
				}
				passwords[u.Name] = base64.RawURLEncoding.EncodeToString(raw)
				fmt.Fprintf(&creds, "%s %s\n", u.Name, passwords[u.Name])
				fmt.Fprintf(&env, "%s=%s\n", natsauth.EnvName(u.Name), passwords[u.Name])
			}
			pw := natsauth.Hashed(passwords)
			if fromEnv {
				pw = natsauth.FromEnv
			}
			conf, err := natsauth.Config(users, pw)
			if err != nil {
				return err
			}
			if !force {
				for _, name := range []string{"auth.conf", "credentials", "compose.env", "cluster.conf"} {
					if _, err := os.Stat(filepath.Join(out, name)); err == nil {
						return codeError{exitError, fmt.Errorf("%s exists: new passwords would lock out whoever uses the old ones; --force replaces them all", filepath.Join(out, name))}
					}
				}
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return codeError{exitError, err}
			}
			files := map[string]string{"auth.conf": conf, "credentials": creds.String(), "compose.env": env.String()}
			if !fromEnv && len(routes) > 0 {
				raw := make([]byte, 24)
				if _, err := rand.Read(raw); err != nil {
					return err
				}
				if files["cluster.conf"], err = natsauth.ClusterConfig(routes, base64.RawURLEncoding.EncodeToString(raw)); err != nil {
					return err
				}
			}
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o600); err != nil {
					return codeError{exitError, err}
				}
			}
			names := slices.Sorted(maps.Keys(files))
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d users to %s (%s)\n", len(users), out, strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the folder to write auth.conf, credentials and compose.env to")
	cmd.Flags().StringSliceVar(&routes, "routes", []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}, "the cluster's nodes (host:port of their cluster listeners), for cluster.conf; empty: none")
	cmd.Flags().BoolVar(&force, "force", false, "replace the files of an earlier run (new passwords for every user)")
	cmd.Flags().BoolVar(&fromEnv, "from-env", false, "auth.conf reads the passwords from the server's environment (TROY_NATS_PW_<USER>) instead of holding hashes")
	return cmd
}
