package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus"
	webconsole "github.com/troy-audit/troy/pkg/console"
	"github.com/troy-audit/troy/pkg/httpauth"

	"github.com/troy-audit/troy/pkg/httpapi"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/streamer"
	"github.com/troy-audit/troy/services/syslog"
)

func newServeCmd(g *globalFlags) *cobra.Command {
	var target, natsAddr, httpAddr, policyPath, reportsDir, reportMode string
	var workers, replicas, maxRuns int
	var streamIdle time.Duration
	var streamMember string
	var withLedger bool
	var natsAuth string
	var ledgerKey string
	var checkpointEvery uint64
	var checkpointInterval time.Duration
	var lf llmFlags
	var sec httpSecurity
	sp, sl := splunk.DefaultConfig(), syslog.DefaultConfig()
	var grace, readTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run troy's services: all of them with an embedded NATS server, or one --target against a cluster",
		Long: `Run troy's pipeline services.

With no --nats-url, troy starts an embedded NATS server with JetStream that also
accepts outside clients on --nats-addr, and runs every service in this process.
With --nats-url it runs the --target services against that server or cluster;
start more processes of a target to scale it out.

HTTP on --http-addr: /healthz, /readyz, /metrics (Prometheus), and
POST /v1/traces[?run=R&policy=HASH] to stream one trace into the pipeline
(its report lands on troy.report.<run>, and in --reports-dir if set).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, err := parseTargets(target)
			if err != nil {
				return codeError{exitError, err}
			}
			log, err := g.logger(cmd.ErrOrStderr(), "info")
			if err != nil {
				return codeError{exitError, err}
			}
			modes, err := report.ParseModes(reportMode)
			if err != nil {
				return codeError{exitError, fmt.Errorf("--report-mode: %w", err)}
			}
			member, err := streamer.ParseMember(streamMember)
			if err != nil {
				return codeError{exitError, fmt.Errorf("--stream-member: %w", err)}
			}
			var def *policy.Engine
			if policyPath != "" {
				if def, err = loadPolicy(policyPath); err != nil {
					return codeError{exitError, err}
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			if err := sec.resolve(httpAddr); err != nil {
				return codeError{exitError, err}
			}
			if sec.tokens != nil {
				// clients only hear "503: the operator must fix it"; the operator hears why
				sec.tokens.OnReload = func(n int, err error) {
					if err != nil {
						log.Error().Err(err).Msg("the tokens file cannot be used: every client is refused until it is fixed")
						return
					}
					log.Info().Int("tokens", n).Msg("tokens file reloaded")
				}
			}
			if g.natsURL == "" && natsAuth == "" && !isLoopback(natsAddr) && !sec.insecure {
				return codeError{exitError, fmt.Errorf("--nats-addr %s is reachable from the network and the embedded NATS server has no users: "+
					"give --nats-auth FILE (troy nats-config --out DIR writes DIR/auth.conf), bind 127.0.0.1, or pass --insecure-no-auth to serve it open anyway", natsAddr)}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			lis, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return codeError{exitError, fmt.Errorf("--http-addr %s: %w (pick a free address)", httpAddr, err)}
			}
			cfg := stackConfig{client: g.client("troy-serve"), waitForServer: true, dataDir: g.dataDir, noProvision: g.noProvision, targets: targets,
				workers: workers, maxRuns: maxRuns, policy: def, reportsDir: reportsDir, reportModes: modes, replicas: replicas, splunk: sp, syslog: sl, streamIdle: streamIdle,
				streamMember: member, ledger: withLedger, natsAuth: natsAuth, ledgerKey: ledgerKey, checkpointEvery: checkpointEvery, checkpointInterval: checkpointInterval}
			if slices.Contains(targets, "explainer") {
				if cfg.llm, err = lf.resolve(cmd, cmd.ErrOrStderr()); err != nil {
					lis.Close()
					return codeError{exitError, err}
				}
			}
			if g.natsURL == "" {
				cfg.listen = natsAddr
			}
			st, err := startStack(ctx, cfg, log, reg)
			if err != nil {
				lis.Close()
				return codeError{exitError, err}
			}
			var defaultPolicy string
			if def != nil {
				defaultPolicy = def.Policy().PolicyID // pushed by startStack
			}
			api, err := httpAPI(ctx, st, defaultPolicy, log)
			if err != nil {
				lis.Close()
				_ = st.Close(5 * time.Second)
				return codeError{exitError, err}
			}
			// A client that sends its request slowly (or never finishes
			// it) is cut off, so slow connections cannot pile up.
			handler, closeConsole := httpHandler(ctx, st, reg, api, sec)
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: min(5*time.Second, readTimeout),
				ReadTimeout: readTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20, TLSConfig: sec.tls}
			srv.RegisterOnShutdown(closeConsole) // open consoles' live feeds end, so shutdown need not wait on them
			scheme := "http"
			if sec.tls != nil {
				scheme = "https"
				lis = tls.NewListener(lis, sec.tls)
			}
			go func() {
				if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
					st.fail(fmt.Errorf("http: %w", err))
				}
			}()
			natsWhere := bus.RedactURL(g.natsURL)
			if st.emb != nil {
				natsWhere = st.emb.ClientURL() + " (embedded, store " + g.dataDir + ")"
			}
			policyLine := "none: traces and checks must name one (serve --policy FILE or TEMPLATE sets it)"
			if def != nil {
				policyLine = def.Policy().PolicyID + " " + def.Hash()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "troy serving %v\n  nats: %s\n  http: %s://%s (console at /)\n  http auth: %s\n  default policy: %s\n",
				targets, natsWhere, scheme, lis.Addr(), sec.tokensSource, policyLine)
			fmt.Fprintf(cmd.OutOrStdout(), "  endpoints: %s\n", strings.Join(endpoints(st, scheme+"://"+lis.Addr().String()), ", "))
			log.Info().Strs("targets", targets).Str("nats", natsWhere).Str("http", scheme+"://"+lis.Addr().String()).Str("http_auth", sec.tokensSource).Msg("troy serving")

			var runErr error
			select {
			case <-ctx.Done():
				log.Info().Msg("shutting down")
			case <-st.Failed():
				runErr = st.Err()
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
			defer cancel()
			_ = srv.Shutdown(sctx)
			if err := st.Close(grace); err != nil {
				log.Warn().Err(err).Msg("shutdown")
			}
			if runErr != nil {
				return codeError{exitError, runErr}
			}
			log.Info().Msg("stopped")
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&target, "target", envOr("TROY_TARGET", "all"), targetHelp())
	fl.StringVar(&natsAddr, "nats-addr", envOr("TROY_NATS_ADDR", "127.0.0.1:4222"), "client address of the embedded NATS server (env TROY_NATS_ADDR)")
	fl.StringVar(&natsAuth, "nats-auth", os.Getenv("TROY_NATS_AUTH"), "the embedded NATS server's users: troy nats-config's auth.conf (env TROY_NATS_AUTH); required on a non-loopback --nats-addr")
	fl.StringVar(&httpAddr, "http-addr", envOr("TROY_HTTP_ADDR", "127.0.0.1:8080"), "health, readiness and metrics address (env TROY_HTTP_ADDR)")
	fl.StringVar(&policyPath, "policy", os.Getenv("TROY_POLICY"), "default policy for traces that name none (env TROY_POLICY)")
	fl.StringVar(&reportsDir, "reports-dir", os.Getenv("TROY_REPORTS_DIR"), "also write every report to DIR/<run>/<trace_id>/ (env TROY_REPORTS_DIR)")
	fl.StringVar(&reportMode, "report-mode", envOr("TROY_REPORT_MODE", "0600"), "permissions of report files in --reports-dir (folders get x where r is set) (env TROY_REPORT_MODE)")
	fl.IntVar(&replicas, "replicas", envInt("TROY_REPLICAS", 0), "replicas of troy's streams and buckets, e.g. 3 on a 3-node cluster (env TROY_REPLICAS); default: keep what exists, 1 for new")
	fl.BoolVar(&withLedger, "ledger", envOr("TROY_LEDGER", "true") != "false",
		"record every guard decision and every audit in the decision ledger (troy ledger list); --ledger=false to not (env TROY_LEDGER)")
	fl.StringVar(&ledgerKey, "ledger-key", os.Getenv("TROY_LEDGER_KEY"),
		"target checkpointer: the Ed25519 key that signs ledger checkpoints, a file or the key itself (troy ledger keygen; env TROY_LEDGER_KEY)")
	fl.Uint64Var(&checkpointEvery, "checkpoint-every", 1000, "target checkpointer: sign a checkpoint every this many new ledger entries")
	fl.DurationVar(&checkpointInterval, "checkpoint-interval", time.Minute, "target checkpointer: and at least this often while the ledger grows")
	fl.IntVar(&workers, "workers", 0, "handlers per service (default: each service's own)")
	fl.IntVar(&maxRuns, "max-concurrent-runs", envInt("TROY_MAX_CONCURRENT_RUNS", 0), "target agent-runner: agent runs this process drives at once (env TROY_MAX_CONCURRENT_RUNS; default 4)")
	fl.DurationVar(&readTimeout, "http-read-timeout", 30*time.Second, "longest an HTTP client may take to send one request, body included")
	fl.DurationVar(&grace, "shutdown-grace", 20*time.Second, "time allowed for in-flight messages to finish on shutdown")
	lf.register(cmd)
	sec.register(cmd)
	fl.DurationVar(&streamIdle, "stream-idle", 5*time.Minute, "a streamed trace with no new step for this long ends")
	fl.StringVar(&streamMember, "stream-member", os.Getenv("TROY_STREAM_MEMBER"),
		"target streamer: read only share i of n of the stream partitions (i/n, e.g. 1/2 and 2/2 on two hosts); processes with the same share stand by for each other; default all (env TROY_STREAM_MEMBER)")
	fl.StringVar(&sp.URL, "splunk-url", os.Getenv("TROY_SPLUNK_URL"), "target splunk: HTTP Event Collector URL, e.g. https://splunk:8088 (env TROY_SPLUNK_URL)")
	fl.StringVar(&sp.Token, "splunk-token", os.Getenv("TROY_SPLUNK_TOKEN"), "target splunk: HEC token (env TROY_SPLUNK_TOKEN)")
	fl.StringVar(&sp.Index, "splunk-index", os.Getenv("TROY_SPLUNK_INDEX"), "target splunk: index (default: the token's)")
	fl.IntVar(&sp.BatchSize, "splunk-batch", sp.BatchSize, "target splunk: findings per request")
	fl.StringVar(&sl.Addr, "syslog-addr", os.Getenv("TROY_SYSLOG_ADDR"), "target syslog: collector host:port (env TROY_SYSLOG_ADDR)")
	fl.StringVar(&sl.Network, "syslog-network", envOr("TROY_SYSLOG_NETWORK", sl.Network), "target syslog: tcp (RFC 6587 octet counting) or udp")
	return cmd
}

// httpAPI wires the trace endpoints: policies are resolved before anything
// is accepted, streamed traces go to their partition.
func httpAPI(ctx context.Context, st *stack, defaultPolicy string, log zerolog.Logger) (httpAPIConfig, error) {
	store, err := policystore.Open(ctx, st.js)
	if err != nil {
		return httpAPIConfig{}, err
	}
	store.SetDefault(defaultPolicy)
	if err := store.Watch(ctx); err != nil {
		return httpAPIConfig{}, err
	}
	topo, err := pipelines.Load()
	if err != nil {
		return httpAPIConfig{}, err
	}
	kv, err := st.js.KeyValue(ctx, pipelines.BucketStreams)
	if err != nil {
		return httpAPIConfig{}, fmt.Errorf("http api: bucket %s: %w", pipelines.BucketStreams, err)
	}
	steps, err := st.js.Stream(ctx, pipelines.StreamSteps)
	if err != nil {
		return httpAPIConfig{}, fmt.Errorf("http api: stream %s: %w", pipelines.StreamSteps, err)
	}
	parts := bus.StreamPartitions(topo)
	return httpAPIConfig{
		traces: httpapi.TracesConfig{Limits: trace.DefaultLimits(), Policy: defaultPolicy, Policies: store, Partitions: parts, Log: log},
		stream: httpapi.Streaming{Pub: st.js, Policies: store, State: kv, Log: steps, Partitions: parts, Limits: trace.DefaultLimits(),
			Policy: defaultPolicy},
	}, nil
}

type httpAPIConfig struct {
	traces httpapi.TracesConfig
	stream httpapi.Streaming
}

// httpHandler routes the API; with tokens, each endpoint needs its scope
// (health and readiness stay open, for probes).
func httpHandler(ctx context.Context, st *stack, reg *prometheus.Registry, api httpAPIConfig, sec httpSecurity) (http.Handler, func()) {
	tokens := sec.tokens
	mux := http.NewServeMux()
	mux.Handle("POST /v1/traces", tokens.Require(httpauth.Ingest, httpapi.Traces(st.js, api.traces)))
	mux.Handle("POST /v1/traces/{trace_id}/start", tokens.Require(httpauth.Ingest, api.stream.Start()))
	mux.Handle("POST /v1/traces/{trace_id}/steps", tokens.Require(httpauth.Ingest, api.stream.Steps()))
	mux.Handle("POST /v1/traces/{trace_id}/end", tokens.Require(httpauth.Ingest, api.stream.End()))
	if st.guard != nil {
		mux.Handle("POST /v1/guard/check", tokens.Require(httpauth.Guard, httpapi.Guard(st.guard)))
	}
	approvals, err := agentrun.OpenApprovals(ctx, st.js)
	if err == nil {
		mux.Handle("POST /v1/approvals/{id}", tokens.Require(httpauth.Approve, approvalHandler(approvals)))
	} else {
		approvals = nil
	}
	// the web console: its page is open, what it shows takes read
	ccfg := webconsole.Config{JS: st.js, Approvals: approvals, Log: st.log}
	if sessions, err := agentrun.OpenSessions(ctx, st.js); err == nil {
		ccfg.Sessions = sessions
	}
	con := webconsole.New(ctx, ccfg)
	for pattern, h := range con.Handlers(tokens.Require, httpauth.Read) {
		mux.Handle(pattern, h)
	}
	mux.Handle("POST /console/login", tokens.Login(sec.tls != nil))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := st.Err(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !st.nc.IsConnected() {
			http.Error(w, "not ready: NATS connection is "+st.nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", tokens.Require(httpauth.Read, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	// A web page the operator visits may not post to the API from the
	// browser (the open loopback API above all: a forged approval or
	// trace): cross-origin browser requests that change state are
	// refused; clients that are not browsers send no such headers.
	return http.NewCrossOriginProtection().Handler(mux), con.Close
}

// endpoints lists what the HTTP API serves, for the banner.
func endpoints(st *stack, base string) []string {
	out := []string{"POST " + base + "/v1/traces", "POST /v1/traces/{trace_id}/start|steps|end"}
	if st.guard != nil {
		out = append(out, "POST /v1/guard/check")
	}
	return append(out, "POST /v1/approvals/{id}", "GET / (console)", "GET /healthz /readyz", "GET /metrics")
}
