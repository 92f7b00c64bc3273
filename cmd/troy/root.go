package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/natsembed"
)

// Exit codes.
const (
	exitOK        = 0
	exitError     = 1 // usage, config, or an input rejected
	exitViolation = 2 // --fail-on matched
)

// exitError carries an exit code out of a command.
type codeError struct {
	code int
	err  error
}

func (e codeError) Error() string { return e.err.Error() }
func (e codeError) Unwrap() error { return e.err }

// globalFlags are shared by every command that touches NATS.
type globalFlags struct {
	natsURL   string
	creds     string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	dataDir   string
	logLevel  string
	logFormat string
	// noProvision: only check the topology is there (the user may not
	// create streams; an operator runs troy provision)
	noProvision bool
}

func (g *globalFlags) client(name string) bus.ClientConfig {
	return bus.ClientConfig{URL: g.natsURL, Creds: g.creds, TLSCA: g.tlsCA, TLSCert: g.tlsCert, TLSKey: g.tlsKey, Name: name,
		Password: os.Getenv("TROY_NATS_PASSWORD")}
}

// DefaultServerURL is where troy serve's embedded NATS listens by default.
const DefaultServerURL = "nats://127.0.0.1:4222"

// serverClient is how a client command reaches a running troy: --nats-url,
// else NATS_URL, else troy serve's default address — never a throwaway
// embedded server that no running troy would see.
func (g *globalFlags) serverClient(name string) bus.ClientConfig {
	c := g.client(name)
	if c.URL == "" {
		c.URL = DefaultServerURL
	}
	return c
}

// connectServer connects a client command, saying plainly when nothing
// listens at the default address.
func connectServer(g *globalFlags, name string) (*nats.Conn, error) {
	c := g.serverClient(name)
	nc, err := bus.Connect(c)
	if errors.Is(err, nats.ErrNoServers) && g.natsURL == "" {
		return nil, fmt.Errorf("nothing answers at %s, troy serve's default address: start troy serve, or give --nats-url (or NATS_URL)", c.URL)
	}
	return nc, err
}

// readerClient picks where a client command reads (see withBus): a
// client config with an empty URL means the embedded store in --data-dir,
// which then exists.
func (g *globalFlags) readerClient(cmd *cobra.Command, storeOK bool) (bus.ClientConfig, error) {
	if g.natsURL != "" {
		return g.client("troy-client"), nil
	}
	named := cmd.Flags().Changed("data-dir") || os.Getenv("TROY_DATA_DIR") != ""
	hasStore := embeddedStoreAt(g.dataDir)
	switch {
	case storeOK && named && hasStore:
		return bus.ClientConfig{Name: "troy-client"}, nil
	case storeOK && named:
		return bus.ClientConfig{}, fmt.Errorf("no embedded store in %s (the --data-dir or TROY_DATA_DIR given): troy agent run without --nats-url keeps one where it runs", g.dataDir)
	}
	def := g.serverClient("troy-client")
	if listening(def.URL) {
		if hasStore && !natsembed.InUse(g.dataDir) {
			// both are here (and the store is not that serve's): say which answers
			fmt.Fprintf(cmd.ErrOrStderr(), "troy: reading the troy serve at %s (the store in %s is read with --data-dir)\n", def.URL, g.dataDir)
		}
		return def, nil
	}
	if storeOK && hasStore {
		fmt.Fprintf(cmd.ErrOrStderr(), "troy: nothing answers at %s (troy serve's default address): reading the embedded store in %s\n", def.URL, g.dataDir)
		return bus.ClientConfig{Name: "troy-client"}, nil
	}
	if !storeOK {
		return bus.ClientConfig{}, fmt.Errorf("nothing answers at %s, troy serve's default address: this needs a running troy; start troy serve, or give --nats-url (or NATS_URL)", def.URL)
	}
	return bus.ClientConfig{}, fmt.Errorf("nothing answers at %s, troy serve's default address, and there is no embedded store in %s: start troy serve, give --nats-url (or NATS_URL), or run where troy agent run ran (or --data-dir)", def.URL, g.dataDir)
}

// embeddedStoreAt says whether an embedded server has kept a JetStream
// store in dir.
func embeddedStoreAt(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "jetstream"))
	return err == nil && fi.IsDir()
}

// listening says whether something accepts connections at a nats:// URL.
func listening(natsURL string) bool {
	u, err := url.Parse(natsURL)
	if err != nil || u.Host == "" {
		return false
	}
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (g *globalFlags) logger(stderr io.Writer, defaultLevel string) (zerolog.Logger, error) {
	lvl := g.logLevel
	if lvl == "" {
		lvl = defaultLevel
	}
	level, err := zerolog.ParseLevel(lvl)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: want debug, info, warn or error", lvl)
	}
	var w io.Writer = stderr
	switch g.logFormat {
	case "json":
	case "console", "":
		if g.logFormat == "console" || isTerminal(stderr) {
			w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05"}
		}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want console or json", g.logFormat)
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "troy",
		Short:         "Audit what AI agents do, and govern them while they run",
		Version:       version, // troy --version, as troy version
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("troy {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.logLevel, "log-level", os.Getenv("TROY_LOG_LEVEL"), "debug, info, warn or error (env TROY_LOG_LEVEL)")
	pf.StringVar(&g.logFormat, "log-format", os.Getenv("TROY_LOG_FORMAT"), "console or json (default: console on a terminal, else json)")
	root.AddCommand(newAuditCmd(g), newAuditBatchCmd(g), newServeCmd(g), newCheckCmd(g), newPoliciesCmd(g), newReplayCmd(g), newDiffCmd(), newTrendsCmd(), newMCPProxyCmd(g), newViolationsCmd(g), newAgentCmd(g), newApprovalsCmd(g), newLedgerCmd(g), newTokensCmd(), newProvisionCmd(g), newNATSConfigCmd(), newVersionCmd())
	// only the commands that reach NATS list its flags
	for path, store := range natsCommands {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil || c == root {
			panic("natsCommands: no command " + path)
		}
		fs := c.Flags()
		if c.HasSubCommands() {
			fs = c.PersistentFlags()
		}
		g.natsFlags(fs, store)
	}
	registerCompletions(root)
	return root
}

// natsCommands are the commands that reach NATS; true: they may also run
// on (or read) the embedded server's store in --data-dir.
var natsCommands = map[string]bool{
	"audit": true, "audit-batch": true, "serve": true, "agent": true, "replay": true,
	"ledger show": true, "ledger verify": true, "ledger list": true, "ledger proof": true, "ledger checkpoint": true,
	"check": false, "policies push": false, "mcp-proxy": false, "violations": false,
	"approvals": false, "provision": false,
}

func (g *globalFlags) natsFlags(fs *pflag.FlagSet, store bool) {
	urlHelp := "NATS server or cluster of a running troy (env NATS_URL; default " + DefaultServerURL + ")"
	if store {
		urlHelp = "NATS server or cluster to use (env NATS_URL); empty: an embedded server, store in --data-dir"
	}
	fs.StringVar(&g.natsURL, "nats-url", os.Getenv("NATS_URL"), urlHelp)
	fs.StringVar(&g.creds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&g.tlsCA, "nats-tls-ca", os.Getenv("NATS_TLS_CA"), "CA certificate to verify the NATS server (env NATS_TLS_CA)")
	fs.StringVar(&g.tlsCert, "nats-tls-cert", os.Getenv("NATS_TLS_CERT"), "client certificate for NATS mTLS (env NATS_TLS_CERT)")
	fs.StringVar(&g.tlsKey, "nats-tls-key", os.Getenv("NATS_TLS_KEY"), "client key for NATS mTLS (env NATS_TLS_KEY)")
	fs.BoolVar(&g.noProvision, "no-provision", os.Getenv("TROY_NO_PROVISION") == "1" || os.Getenv("TROY_NO_PROVISION") == "true",
		"do not create or update streams, consumers and buckets, only check they are there (users without the right to; an operator runs troy provision; env TROY_NO_PROVISION=1)")
	if store {
		fs.StringVar(&g.dataDir, "data-dir", envOr("TROY_DATA_DIR", ".troy/data"), "store of the embedded NATS server (env TROY_DATA_DIR)")
	}
}

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print troy's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "troy", version)
		},
	}
}

func execute(args []string, stdout, stderr io.Writer) int {
	stopProfiles, err := startProfiles()
	if err != nil {
		fmt.Fprintln(stderr, "troy:", err)
		return exitError
	}
	defer stopProfiles()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var ce codeError
	if errors.As(err, &ce) {
		if ce.err != nil && ce.err.Error() != "" {
			fmt.Fprintln(stderr, "troy:", ce.err)
		}
		return ce.code
	}
	msg := err.Error()
	fmt.Fprintln(stderr, "troy:", msg)
	switch {
	case cmd != nil && cmd != root && (strings.Contains(msg, "arg(s)") || strings.Contains(msg, "unknown flag") || strings.Contains(msg, "flag needs")):
		// the command's own usage line names what it wants
		fmt.Fprintf(stderr, "usage: %s\nRun '%s --help' for more.\n", cmd.UseLine(), cmd.CommandPath())
	case strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown flag") || strings.Contains(msg, "accepts") || strings.Contains(msg, "requires"):
		fmt.Fprintln(stderr, "Run 'troy --help' for usage.")
	}
	return exitError
}
