package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/guardrails"
	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/natsembed"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/report"
)

// Exit codes of troy agent (as the framework it follows has them).
const (
	agentComplete = 0 // the run ended complete
	agentNotDone  = 1 // any other terminal status
	agentUsage    = 2 // config or usage error
)

func newAgentCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Run governed agents: plan, act, execute, observe, audited while they run"}
	cmd.AddCommand(newAgentRunCmd(g), newAgentResumeCmd(g), newAgentListCmd(g), newAgentShowCmd(g), newAgentStatsCmd(g))
	// Usage mistakes exit 2, like config errors.
	for _, c := range cmd.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return codeError{agentUsage, err} })
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return codeError{agentUsage, fmt.Errorf("%w (see troy agent %s --help)", err, cmd.Name())}
			}
			return nil
		}
	}
	return cmd
}

type agentFlags struct {
	goalFile  string
	workspace string
	jsonOut   bool
	outDir    string
	modes     string
	wait      time.Duration
	quiet     bool // observability.console: false
}

func (f *agentFlags) register(cmd *cobra.Command, withGoal bool) {
	fl := cmd.Flags()
	if withGoal {
		fl.StringVar(&f.goalFile, "goal-file", "", "read the goal from this file")
		fl.StringVar(&f.workspace, "workspace", "", "folder the agent's tools may touch (overrides the config's; default: the current directory)")
	}
	fl.BoolVar(&f.jsonOut, "json", false, "print the result as JSON on stdout")
	fl.StringVar(&f.outDir, "out-dir", "", "where the run's audit report goes (default logs/<date>/agent-<run_id>/)")
	fl.StringVar(&f.modes, "report-mode", os.Getenv("TROY_REPORT_MODE"), "report file and folder modes, e.g. 0640,0750")
	fl.DurationVar(&f.wait, "report-wait", 30*time.Second, "how long to wait for the run's audit report after it ends")
}

func newAgentRunCmd(g *globalFlags) *cobra.Command {
	f := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "run CONFIG [GOAL]",
		Short: "Run an agent on a goal (from the argument, --goal-file, or stdin)",
		Long: `Run a governed agent described by CONFIG (agent.yaml or agent.json) on a goal.

Every event is published on troy.agent.events.<run_id>.<type>, every step is
audited as it happens (the config's audit.policy, default agent_safety), and the
run's report is written when it ends. With --nats-url the run is queued for a
troy serve --target agent-runner on that server.

The first Ctrl-C (or SIGTERM) cancels at the next checkpoint and still prints a
result (the session can be resumed); a second stops at once.

Exit code: 0 the run ended complete, 1 any other status, 2 a config or usage error.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			goal, err := readGoal(cmd, args, f.goalFile)
			if err != nil {
				return codeError{agentUsage, err}
			}
			lookup := dotEnvLookup()
			file, err := spec.Load(args[0], lookup)
			if err != nil {
				return codeError{agentUsage, err}
			}
			portable, err := spec.Portable(args[0])
			if err != nil {
				return codeError{agentUsage, err}
			}
			ws := f.workspace
			if ws == "" && file.Workspace == "" {
				ws = "."
			}
			if ws != "" {
				if ws, err = filepath.Abs(ws); err != nil {
					return codeError{agentUsage, err}
				}
				if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
					return codeError{agentUsage, fmt.Errorf("--workspace %s is not a directory", ws)}
				}
			}
			// the files and folders the config names, all checked at once
			if probs := preflight(file, f.workspace != ""); len(probs) > 0 {
				return codeError{agentUsage, &spec.Error{Source: args[0], Problems: probs}}
			}
			// Build once here, so every config problem is a usage error
			// before anything is queued.
			pp, err := operatorProviderPolicy()
			if err != nil {
				return codeError{agentUsage, err}
			}
			// (the runner gives the real approvers; these only let the check pass)
			probe, err := file.Build(spec.Deps{Workspace: ws, Settings: spec.EnvThen(lookup), ProviderPolicy: pp,
				NATSApprover: func(time.Duration) guardrails.Approver { return guardrails.DenyAll{} }})
			if err != nil {
				return codeError{agentUsage, err}
			}
			if _, err := agent.New(probe); err != nil {
				return codeError{agentUsage, err}
			}
			cfgPath, _ := filepath.Abs(args[0])
			req := agentrun.Request{RunID: agent.NewID(), SessionID: agent.NewID(), Goal: goal, Config: portable, Workspace: ws, ConfigPath: cfgPath}
			f.quiet = file.Observability.Console != nil && !*file.Observability.Console
			return runAgent(cmd, g, f, req, probe.Workspace)
		},
	}
	f.register(cmd, true)
	return cmd
}

func newAgentResumeCmd(g *globalFlags) *cobra.Command {
	f := &agentFlags{}
	cmd := &cobra.Command{
		Use:   "resume SESSION_ID",
		Short: "Go on with a session that was cancelled, ran out of budget, failed or was interrupted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !agentrun.ValidID(args[0]) {
				return codeError{agentUsage, fmt.Errorf("session id %q: use the id troy agent list shows", args[0])}
			}
			req := agentrun.Request{RunID: agent.NewID(), SessionID: args[0], Resume: true}
			return runAgent(cmd, g, f, req, "")
		},
	}
	f.register(cmd, false)
	return cmd
}

// preflight checks what a config names on disk (its paths are already
// made absolute against its folder): skills folders, the scripted model's
// script, the workspace, the audit policy.
func preflight(f *spec.File, workspaceGiven bool) []string {
	var probs []string
	isDir := func(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() }
	if f.Skills != nil && (f.Skills.Enabled == nil || *f.Skills.Enabled) {
		for i, d := range f.Skills.Dirs {
			if !isDir(d) {
				probs = append(probs, fmt.Sprintf("skills.dirs[%d]: %s is not a folder (paths are from the config's folder)", i, d))
			}
		}
	}
	if strings.EqualFold(f.LLM.Provider, "scripted") && f.LLM.Script != "" {
		if _, err := os.Stat(f.LLM.Script); err != nil {
			probs = append(probs, fmt.Sprintf("llm.script: %s: no such file (paths are from the config's folder)", f.LLM.Script))
		}
	}
	if f.Workspace != "" && !workspaceGiven && !isDir(f.Workspace) {
		probs = append(probs, fmt.Sprintf("workspace: %s is not a folder (create it first; paths are from the config's folder)", f.Workspace))
	}
	if (f.Audit.Enabled == nil || *f.Audit.Enabled) && f.Audit.Policy != "" {
		if _, err := loadPolicy(f.Audit.Policy); err != nil {
			probs = append(probs, fmt.Sprintf("audit.policy: %v", err))
		}
	}
	return probs
}

// resumable checks on the bus that a session exists and can go on.
func resumable(ctx context.Context, st *stack, id string) error {
	sessions, err := agentrun.OpenSessions(ctx, st.js)
	if err != nil {
		return err
	}
	s, err := sessions.Load(ctx, id)
	if errors.Is(err, agent.ErrSessionNotFound) {
		return fmt.Errorf("no session %s (troy agent list shows them)", id)
	}
	if err != nil {
		return err
	}
	if !s.Status.Resumable() {
		return fmt.Errorf("session %s ended %s: only running, cancelled, exhausted or failed sessions can be resumed", id, s.Status)
	}
	return nil
}

// readGoal takes the goal from the argument, a file, or stdin.
func readGoal(cmd *cobra.Command, args []string, goalFile string) (string, error) {
	var goal string
	switch {
	case len(args) == 2 && goalFile != "":
		return "", errors.New("the goal is given twice, as an argument and with --goal-file: give it once")
	case len(args) == 2:
		goal = args[1]
	case goalFile != "":
		b, err := os.ReadFile(goalFile)
		if err != nil {
			return "", fmt.Errorf("--goal-file: %w", err)
		}
		goal = string(b)
	default:
		in := cmd.InOrStdin()
		if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return "", errors.New("no goal: give it as the second argument, with --goal-file, or on stdin")
		}
		b, err := io.ReadAll(io.LimitReader(in, 1<<20))
		if err != nil {
			return "", fmt.Errorf("reading the goal from stdin: %w", err)
		}
		goal = string(b)
	}
	goal = strings.TrimSpace(goal)
	if goal == "" {
		return "", errors.New("the goal is empty: give it as the second argument, with --goal-file, or on stdin")
	}
	return goal, nil
}

// runAgent runs (embedded) or submits (--nats-url) one request, shows it
// live and prints its result.
func runAgent(cmd *cobra.Command, g *globalFlags, f *agentFlags, req agentrun.Request, workspace string) error {
	log, err := g.logger(cmd.ErrOrStderr(), "warn")
	if err != nil {
		return codeError{agentUsage, err}
	}
	modes, err := report.ParseModes(f.modes)
	if err != nil {
		return codeError{agentUsage, err}
	}
	remote := g.natsURL != ""
	if req.Resume && !remote && !embeddedStoreAt(g.dataDir) {
		// nothing to resume here, and no store to make for it
		return codeError{agentUsage, fmt.Errorf("no session %s: there is no embedded store in %s (resume where the run ran, or give --data-dir, or --nats-url of the troy serve that ran it)", req.SessionID, g.dataDir)}
	}
	cfg := stackConfig{client: g.client("troy-agent"), dataDir: g.dataDir, noProvision: g.noProvision}
	if !remote {
		cfg.targets = append(componentNames(kindStage), "streamer")
	}
	base, cancelAll := context.WithCancel(cmd.Context())
	defer cancelAll()
	st, err := startStack(base, cfg, log, prometheus.NewRegistry())
	if err != nil {
		return codeError{agentNotDone, err}
	}
	defer func() {
		if err := st.Close(30 * time.Second); err != nil {
			log.Warn().Err(err).Msg("shutdown")
		}
	}()
	if req.Resume {
		// said here, before a run id is printed and a request queued that
		// the runner could only refuse
		if err := resumable(base, st, req.SessionID); err != nil {
			return codeError{agentUsage, err}
		}
	}
	stderr := cmd.ErrOrStderr()
	con := &console{w: stderr, out: stderr}
	if f.quiet {
		con.w = io.Discard
	}
	ctl := &agent.Control{}
	cancelRun := func(reason string) {
		if remote {
			if _, err := st.nc.Request(agentrun.CancelPrefix+req.RunID, []byte(reason), 2*time.Second); err != nil {
				con.printf("troy: no runner answered the cancel (%v): the run may not have started yet; Ctrl-C again stops waiting\n", err)
			}
			return
		}
		ctl.Cancel(reason)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				if n == 1 {
					con.printf("troy: cancelling at the next checkpoint (Ctrl-C again to stop now)\n")
					cancelRun("interrupted (Ctrl-C)")
				} else {
					con.printf("troy: stopping now\n")
					cancelAll()
					return
				}
			case <-base.Done():
				return
			}
		}
	}()
	stopViolations, err := agentrun.WatchViolations(base, st.js, req.RunID, con.violation)
	if err == nil {
		defer stopViolations()
	}
	reportWait, werr := agentrun.WatchReport(base, st.js, req.RunID)
	if workspace != "" {
		con.printf("troy: run %s, session %s, workspace %s\n", req.RunID, req.SessionID, workspace)
	} else {
		con.printf("troy: run %s, resuming session %s\n", req.RunID, req.SessionID)
	}

	var out agentrun.Outcome
	if remote {
		out, err = submitAgent(base, st, req, con)
	} else {
		runner, rerr := agentrun.New(base, st.js, bus.StreamPartitions(mustTopology()), log)
		if rerr != nil {
			return codeError{agentNotDone, rerr}
		}
		// Your own run: every ${VAR} of your environment and .env, and you
		// at the terminal decide what needs approval (denied without one).
		runner.Env = spec.EnvThen(dotEnvLookup())
		runner.Settings = runner.Env
		runner.WriterName = writerName("troy-agent")
		if runner.ProviderPolicy, err = operatorProviderPolicy(); err != nil {
			return codeError{agentUsage, err}
		}
		if in, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			runner.Approver = &guardrails.Terminal{In: in, Out: stderr}
		}
		out, err = runner.Execute(base, req, ctl, con)
	}
	if err != nil {
		if errors.Is(err, agentrun.ErrBadRequest) {
			return codeError{agentUsage, err}
		}
		return codeError{agentNotDone, err}
	}
	for _, p := range out.Problems {
		con.printf("troy: warning: %s\n", p)
	}
	if out.PolicyHash != "" && werr == nil && base.Err() == nil {
		dir := f.outDir
		if dir == "" {
			dir = filepath.Join(defaultOutDir(), "agent-"+out.RunID)
		}
		if rep, err := reportWait.Wait(base, f.wait); err != nil {
			con.printf("troy: warning: %v for run %s (its violations were still published on troy.violations.>)\n", err, out.RunID)
		} else if err := writeAgentReport(dir, rep.Audit, rep.Markdown, rep.Responses, modes); err != nil {
			con.printf("troy: warning: writing the report: %v\n", err)
		} else {
			con.printf("troy: audit: risk %d/100, %s; report %s\n", rep.Audit.RiskScore, plural(len(rep.Audit.Violations), "violation", "violations"), filepath.Join(dir, report.MarkdownFile))
		}
	}
	printOutcome(cmd.OutOrStdout(), out, f.jsonOut)
	if out.Status != agent.Complete {
		return codeError{agentNotDone, errQuiet}
	}
	return nil
}

// errQuiet ends a command with its exit code and no further message: the
// result was printed already.
var errQuiet = errors.New("")

func writeAgentReport(dir string, audit *report.Audit, markdown string, responses map[string]string, m report.Modes) error {
	b, err := json.Marshal(audit)
	if err != nil {
		return err
	}
	return report.WriteReport(filepath.Join(dir, report.MarkdownFile), filepath.Join(dir, report.JSONFile), b, []byte(markdown), responses, m)
}

func mustTopology() *pipelines.Topology {
	t, err := pipelines.Load()
	if err != nil {
		panic(err) // embedded in the binary: cannot fail
	}
	return t
}

// submitAgent queues the request for an agent-runner and follows the run.
func submitAgent(ctx context.Context, st *stack, req agentrun.Request, con *console) (agentrun.Outcome, error) {
	ended := make(chan struct{})
	var once sync.Once
	stop, err := agentrun.Follow(ctx, st.js, req.RunID, func(ev agent.Event) bool {
		con.Emit(ev)
		if ev.Type == agent.EventRunEnd {
			once.Do(func() { close(ended) })
		}
		return true
	})
	if err != nil {
		return agentrun.Outcome{}, err
	}
	defer stop()
	// The result and the events come through different consumers: show
	// the run to its end before the result.
	defer func() {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
		}
	}()
	b, err := json.Marshal(req)
	if err != nil {
		return agentrun.Outcome{}, err
	}
	m := nats.NewMsg(agentrun.SubjectRun)
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, "run-"+req.RunID)
	if _, err := st.js.PublishMsg(ctx, m); err != nil {
		return agentrun.Outcome{}, fmt.Errorf("queueing the run: %w (is the server running troy's topology?)", err)
	}
	out, err := agentrun.WaitResult(ctx, st.js, req.RunID)
	if err != nil {
		return out, err
	}
	if out.Error != "" {
		// the runner's words already start "bad run request: …"
		return out, fmt.Errorf("%w: %s", agentrun.ErrBadRequest, strings.TrimPrefix(out.Error, agentrun.ErrBadRequest.Error()+": "))
	}
	return out, nil
}

func printOutcome(w io.Writer, out agentrun.Outcome, jsonOut bool) {
	if jsonOut {
		b, _ := json.MarshalIndent(out.Result, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "[%s] %s\n", out.Status, out.Answer)
	if len(out.Evidence) > 0 {
		fmt.Fprintln(w, "Evidence:")
		for _, e := range out.Evidence {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	if len(out.UnmetRequirements) > 0 {
		fmt.Fprintln(w, "Unmet requirements:")
		for _, u := range out.UnmetRequirements {
			fmt.Fprintf(w, "  - %s\n", u)
		}
	}
	fmt.Fprintf(w, "%s, %d tokens, $%.4f, %.1fs, session=%s run=%s\n", plural(out.Iterations, "iteration", "iterations"), out.TotalTokens, out.CostUSD,
		out.DurationS, out.SessionID, out.RunID)
}

// console prints a run live on stderr, one line per event.
type console struct {
	mu  sync.Mutex
	w   io.Writer // the run's events (io.Discard with console: false)
	out io.Writer // troy's own lines
}

func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		cut := n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Emit implements agent.Sink.
func (c *console) Emit(ev agent.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := ev.Data
	it := fmt.Sprintf("[%d]", ev.Iteration)
	switch ev.Type {
	case agent.EventRunStart:
		fmt.Fprintf(c.w, "▶ %s on %v, tools %v", ev.Agent, d["model"], d["tools"])
		if d["resumed"] == true {
			fmt.Fprint(c.w, " (resumed)")
		}
		fmt.Fprintln(c.w)
		if d["guardrails"] == false {
			fmt.Fprintln(c.w, "⚠ guardrails are OFF (guardrails: {enabled: false}): no call is screened or needs approval")
		}
	case agent.EventPlanCreated:
		na, _ := d["next_action"].(map[string]any)
		fmt.Fprintf(c.w, "%s plan: %v for step %v — %s\n", it, na["tool"], na["step_id"], clipLine(fmt.Sprint(na["rationale"]), 160))
	case agent.EventToolCall:
		args, _ := json.Marshal(d["arguments"])
		fmt.Fprintf(c.w, "%s call %v %s\n", it, d["tool"], clipLine(string(args), 160))
	case agent.EventToolResult:
		status := "ok"
		if d["ok"] != true {
			status = fmt.Sprintf("FAILED %v", d["error_code"])
		}
		fmt.Fprintf(c.w, "%s result %s (%vms): %s\n", it, status, d["duration_ms"], clipLine(fmt.Sprint(d["preview"]), 160))
	case agent.EventEvaluationCreated:
		fmt.Fprintf(c.w, "%s evaluation: %v, goal %v — %s\n", it, d["outcome"], d["goal_status"], clipLine(fmt.Sprint(d["evidence"]), 160))
	case "guardrail.blocked":
		fmt.Fprintf(c.w, "%s blocked %v: %v\n", it, d["tool"], d["reason"])
	case "approval.requested":
		if d["approver"] == "nats" {
			fmt.Fprintf(c.w, "%s approval needed: %v call to %v — troy approvals approve|deny %v\n", it, d["tier"], d["tool"], d["approval_id"])
		} else {
			fmt.Fprintf(c.w, "%s approval needed: %v call to %v (asking the %v approver)\n", it, d["tier"], d["tool"], d["approver"])
		}
	case "approval.decided":
		verdict := "denied"
		if d["approved"] == true {
			verdict = "approved"
		}
		if r, _ := d["reason"].(string); r != "" {
			fmt.Fprintf(c.w, "%s %s by %v: %s\n", it, verdict, d["by"], r)
		} else {
			fmt.Fprintf(c.w, "%s %s by %v\n", it, verdict, d["by"])
		}
	case agent.EventContractViolation:
		fmt.Fprintf(c.w, "%s contract violation (%s, attempt %v): %v\n", it, ev.Phase, d["attempt"], d["reason"])
	case agent.EventBudgetExceeded:
		fmt.Fprintf(c.w, "%s budget exceeded: %v\n", it, d["which"])
	case agent.EventRunCancelled:
		fmt.Fprintf(c.w, "%s cancelled: %v\n", it, d["reason"])
	case agent.EventError:
		fmt.Fprintf(c.w, "%s error: %v\n", it, d["message"])
	case agent.EventRunEnd:
		n, _ := d["iterations"].(float64)
		if v, ok := d["iterations"].(int); ok {
			n = float64(v)
		}
		fmt.Fprintf(c.w, "■ end: %v after %s\n", d["status"], plural(int(n), "iteration", "iterations"))
	}
}

// printf writes a line of troy's own (always shown, even with console off).
func (c *console) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, format, args...)
}

func (c *console) violation(f ocsf.Finding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.w, "[!] violation %s %s at step %v: %s\n", f.Severity, f.FindingInfo.Analytic.UID, f.Unmapped["step_id"], f.FindingInfo.Desc)
}

func newAgentListCmd(g *globalFlags) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List agent sessions: id, goal, status, iterations, cost, age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				sessions, err := agentrun.OpenSessions(ctx, st.js)
				if err != nil {
					return err
				}
				list, err := sessions.List(ctx)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if jsonOut {
					b, _ := json.MarshalIndent(list, "", "  ")
					fmt.Fprintln(out, string(b))
					return nil
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no agent sessions yet: troy agent run CONFIG GOAL starts one")
					return nil
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SESSION\tRUN\tSTATUS\tITER\tCOST\tAGE\tGOAL")
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t$%.4f\t%s\t%s\n", s.SessionID, s.RunID, s.Status, s.Iterations, s.CostUSD,
						time.Since(s.UpdatedAt).Round(time.Second), clipLine(s.Goal, 60))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the sessions as JSON")
	return cmd
}

func newAgentShowCmd(g *globalFlags) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "show RUN_ID [--follow]",
		Short: "Print a run as markdown (with --follow, live until it ends)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !agentrun.ValidID(id) {
				return codeError{agentUsage, fmt.Errorf("run id %q: use the id troy agent run or list printed", id)}
			}
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				out := cmd.OutOrStdout()
				if !follow {
					evs, err := agentrun.ReadEvents(ctx, st.js, id)
					if err != nil {
						if sessions, serr := agentrun.OpenSessions(ctx, st.js); serr == nil {
							if s, lerr := sessions.Load(ctx, id); lerr == nil {
								return fmt.Errorf("%s is a session, not a run: its runs are %s (troy agent show RUN_ID)", id, strings.Join(s.Runs, ", "))
							}
						}
						return err
					}
					fmt.Fprint(out, agent.Markdown(evs))
					tel := &agent.Telemetry{}
					for _, ev := range evs {
						tel.Emit(ev)
					}
					o := tel.Overview()
					fmt.Fprintf(out, "\n*%d model calls (%s), %d tool calls (%.0f%% ok), %d blocked, $%.4f, %.1fs waiting for people*\n",
						o["llm_requests"], counts(tel.LLMPhase), o["tool_calls"], 100*o["tool_success_rate"].(float64), o["blocked_calls"], o["total_cost_usd"], o["idle_wait_s"])
					return nil
				}
				done := make(chan struct{})
				stop, err := agentrun.Follow(ctx, st.js, id, func(ev agent.Event) bool {
					fmt.Fprint(out, agent.Markdown([]agent.Event{ev}))
					if ev.Type == agent.EventRunEnd {
						close(done)
						return false
					}
					return true
				})
				if err != nil {
					return err
				}
				defer stop()
				select {
				case <-done:
				case <-ctx.Done():
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing the run's events as they come, until it ends")
	return cmd
}

// withBus connects a command that reads what runs left behind (sessions,
// ledgers, events) to where they are: --nats-url (or NATS_URL); else the
// embedded store named by --data-dir (or TROY_DATA_DIR); else a troy
// serve at the default address; else the embedded store agent runs keep
// in .troy/data, when there is one. It never makes a store: where there
// is nothing, it says so.
func withBus(cmd *cobra.Command, g *globalFlags, fn func(ctx context.Context, st *stack) error) error {
	return withBusOf(cmd, g, true, fn)
}

// withServerBus is withBus for commands that only make sense on a running
// troy (deciding approvals an agent waits for): never an embedded store.
func withServerBus(cmd *cobra.Command, g *globalFlags, fn func(ctx context.Context, st *stack) error) error {
	return withBusOf(cmd, g, false, fn)
}

func withBusOf(cmd *cobra.Command, g *globalFlags, storeOK bool, fn func(ctx context.Context, st *stack) error) error {
	log, err := g.logger(cmd.ErrOrStderr(), "warn")
	if err != nil {
		return codeError{agentUsage, err}
	}
	client, err := g.readerClient(cmd, storeOK)
	if err != nil {
		return codeError{exitError, err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := startStack(ctx, stackConfig{client: client, dataDir: g.dataDir, noProvision: g.noProvision}, log, prometheus.NewRegistry())
	if def := g.serverClient("troy-client"); errors.Is(err, natsembed.ErrStoreLocked) && listening(def.URL) {
		// the store is a running troy serve's: ask it instead
		fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s is in use by a running troy; reading the troy serve at %s\n", g.dataDir, def.URL)
		st, err = startStack(ctx, stackConfig{client: def, noProvision: g.noProvision}, log, prometheus.NewRegistry())
	}
	if err != nil {
		return codeError{agentNotDone, err}
	}
	defer st.Close(10 * time.Second)
	if err := fn(ctx, st); err != nil {
		var ce codeError
		if errors.As(err, &ce) {
			return err // it chose its exit code
		}
		return codeError{agentNotDone, err}
	}
	return nil
}

func newAgentStatsCmd(g *globalFlags) *cobra.Command {
	var since time.Duration
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "stats [--since 24h] [--json]",
		Short: "Agent runs' numbers: time and idle time, model calls, tool calls, spend, blocks, circuit trips",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(cmd, g, func(ctx context.Context, st *stack) error {
				tel := &agent.Telemetry{}
				if err := agentrun.Replay(ctx, st.js, time.Now().Add(-since), tel.Emit); err != nil {
					return err
				}
				o := tel.Overview()
				out := cmd.OutOrStdout()
				if jsonOut {
					b, _ := json.MarshalIndent(map[string]any{"overview": o, "llm": tel.LLM, "llm_by_phase": tel.LLMPhase, "tools": tel.Tools,
						"runs_by_status": tel.Runs, "blocked_by_tool": tel.BlockedByTool, "circuit_trips": tel.CircuitTrips,
						"budget_exhaustions": tel.Exhaustions}, "", "  ")
					fmt.Fprintln(out, string(b))
					return nil
				}
				fmt.Fprintf(out, "runs: %s\ntime: %.1fs (%.1fs waiting for people)\nmodel calls: %d (%.0f%% ok; %s), %d tokens, $%.4f\n",
					counts(tel.Runs), o["total_run_time_s"], o["idle_wait_s"], o["llm_requests"], 100*o["llm_success_rate"].(float64), counts(tel.LLMPhase), o["total_tokens"], o["total_cost_usd"])
				fmt.Fprintf(out, "tool calls: %d (%.0f%% ok)\n", o["tool_calls"], 100*o["tool_success_rate"].(float64))
				for _, n := range o["tools"].([]string) {
					s := tel.Tools[n]
					fmt.Fprintf(out, "  %-14s %s, %d failed%s\n", n, plural(s.Count, "call", "calls"), s.Errors, paren(counts(s.ErrorCodes)))
				}
				fmt.Fprintf(out, "blocked calls: %d%s; circuit trips: %s; budgets exhausted: %s; cancelled: %d\n",
					tel.Blocked, paren(counts(tel.BlockedByTool)), orNone(counts(tel.CircuitTrips)), orNone(counts(tel.Exhaustions)), tel.Cancellations)
				return nil
			})
		},
	}
	spanVar(cmd.Flags(), &since, "since", 24*time.Hour, "how far back (90m, 12h, 7d, 2w)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// writerName names this process in the ledger records it writes.
func writerName(role string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s/%d", role, host, os.Getpid())
}

// counts renders a tally as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
