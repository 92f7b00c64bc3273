package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/mcpproxy"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/stream"
)

func newMCPProxyCmd(g *globalFlags) *cobra.Command {
	var policyPath, upstream, listen string
	var monitor bool
	var results string
	cmd := &cobra.Command{
		Use:   "mcp-proxy --policy FILE [--monitor] [--listen ADDR] (--upstream URL | -- COMMAND [ARGS…])",
		Short: "Put the guard in front of an MCP server: every tools/call checked, blocked calls never forwarded",
		Long: `Serve an MCP server's tools to an MCP client with troy's guard in between.
The proxy is the server the client sees (over stdio, or streamable HTTP with
--listen) and a client of the real one (a child process over stdio after --,
or streamable HTTP with --upstream). It lists the upstream's tools unchanged
and checks every tools/call against the policy, in a session that is the
client's connection, so cross-step rules see the whole conversation. A
blocked call gets an MCP tool error naming the rules and is never
forwarded; --monitor only reports (on stderr). Logs go to stderr: over stdio,
stdout is the protocol.

  troy mcp-proxy --policy examples/policy.yaml -- npx -y @modelcontextprotocol/server-filesystem /data
  troy mcp-proxy --policy policy.yaml --upstream http://127.0.0.1:9000/mcp --listen 127.0.0.1:8765`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if policyPath == "" {
				return codeError{exitError, errors.New("give --policy FILE: the rules every call is checked against")}
			}
			if (upstream == "") == (len(args) == 0) {
				return codeError{exitError, errors.New("name the upstream MCP server: --upstream URL, or -- COMMAND [ARGS…] to run it")}
			}
			switch results {
			case mcpproxy.ResultsAnnotate, mcpproxy.ResultsWithhold, mcpproxy.ResultsOff:
			default:
				return codeError{exitError, fmt.Errorf("--results %q: want annotate, withhold or off", results)}
			}
			if listen != "" && !isLoopback(listen) {
				return codeError{exitError, fmt.Errorf("--listen %s is reachable from the network: the proxy's HTTP side has no authentication yet; bind 127.0.0.1", listen)}
			}
			engine, err := loadPolicy(policyPath)
			if err != nil {
				return codeError{exitError, err}
			}
			log, err := g.logger(cmd.ErrOrStderr(), "warn")
			if err != nil {
				return codeError{exitError, err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			var up mcp.Transport
			if upstream != "" {
				up = &mcp.StreamableClientTransport{Endpoint: upstream}
			} else {
				child := exec.CommandContext(ctx, args[0], args[1:]...)
				child.Stderr = cmd.ErrOrStderr()
				up = &mcp.CommandTransport{Command: child, TerminateDuration: 2 * time.Second}
			}
			sessions := guard.NewMemSessions()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			audit, auditWhere, err := mcpAudit(cctx, g, engine, log)
			if err != nil {
				return codeError{exitError, err}
			}
			px, err := mcpproxy.Connect(cctx, up, mcpproxy.Config{
				Guard: &guard.Local{Policies: guard.Static{E: engine}, Sessions: sessions, Timeout: 5 * time.Second}, Sessions: sessions,
				Monitor: monitor, Log: log, Ended: audit.End, Results: results,
				Observe: audit.Observe})
			if err != nil {
				return codeError{exitError, err}
			}
			defer px.Close()
			fmt.Fprintf(cmd.ErrOrStderr(), "troy mcp-proxy: %d tools behind policy %s; audit: %s\n", len(px.Tools()), engine.Policy().PolicyID, auditWhere)
			srv := px.Server()
			if listen == "" {
				err := srv.Run(ctx, &mcp.StdioTransport{})
				if err != nil && ctx.Err() == nil {
					return codeError{exitError, err}
				}
				return nil
			}
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return codeError{exitError, err}
			}
			hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
				// a client gone without saying so ends its session (its history
				// freed, its trace ended and reported) after this long idle
				&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute}), ReadHeaderTimeout: 5 * time.Second}
			fmt.Fprintf(cmd.ErrOrStderr(), "troy mcp-proxy: serving MCP on http://%s\n", lis.Addr())
			go func() {
				<-ctx.Done()
				sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
				defer c()
				_ = hs.Shutdown(sctx)
			}()
			if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return codeError{exitError, err}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&policyPath, "policy", "", "the policy file every call is checked against")
	fl.StringVar(&upstream, "upstream", "", "the MCP server's streamable HTTP endpoint (instead of running one after --)")
	fl.StringVar(&listen, "listen", "", "serve MCP over streamable HTTP on this loopback address (default: stdio)")
	fl.BoolVar(&monitor, "monitor", false, "forward every call; only report what would be blocked")
	fl.StringVar(&results, "results", mcpproxy.ResultsAnnotate, "a result the detectors fire on (secrets, prompt injection, personal data): annotate marks it untrusted, withhold answers an error instead, off passes it")
	return cmd
}

// mcpAudit streams each session into the audit of the troy serve at
// --nats-url (findings on its troy.violations.>, reports by its
// reporter); without one, sessions are checked but not audited.
func mcpAudit(ctx context.Context, g *globalFlags, engine *policy.Engine, log zerolog.Logger) (*mcpproxy.Streamer, string, error) {
	if g.natsURL == "" {
		return nil, "off (give --nats-url of a troy serve to stream each session into its audit)", nil
	}
	nc, err := bus.Connect(g.client("troy-mcp-proxy"))
	if err != nil {
		return nil, "", err
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		return nil, "", err
	}
	store, err := policystore.Open(ctx, js)
	if err != nil {
		return nil, "", err
	}
	if _, err := store.Ensure(ctx, engine.Policy(), false); err != nil {
		return nil, "", err
	}
	starts, err := js.KeyValue(ctx, pipelines.BucketStreams)
	if err != nil {
		return nil, "", fmt.Errorf("bucket %s: %w (is troy serve running against this server?)", pipelines.BucketStreams, err)
	}
	return &mcpproxy.Streamer{Sender: stream.Sender{Pub: js, Partitions: bus.StreamPartitions(mustTopology())}, Starts: starts,
		PolicyHash: engine.Hash(), Log: log}, "each session streamed to " + bus.RedactURL(g.natsURL), nil
}
