package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/trace"
)

// auditFlags are shared by audit and audit-batch.
type auditFlags struct {
	failOn        string
	window        int
	timeout       time.Duration
	maxTraceBytes int
	maxSteps      int
	withServices  bool
	jsonOut       bool
	format        string
	reportMode    string
	modes         report.Modes
	llm           llmFlags
}

func (f *auditFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.failOn, "fail-on", "", "exit 2 when a violation at or above this severity is found (critical, high, medium, low)")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up when no trace finishes for this long")
	lim := trace.DefaultLimits()
	fl.IntVar(&f.maxTraceBytes, "max-trace-bytes", lim.MaxBytes, "reject traces larger than this")
	fl.IntVar(&f.maxSteps, "max-steps", lim.MaxSteps, "reject traces with more steps than this")
	fl.BoolVar(&f.withServices, "with-services", false, "with --nats-url, also run the pipeline services in this process (default: they run under troy serve)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the machine-readable result (audit.json or batch.json) on stdout")
	fl.StringVar(&f.reportMode, "report-mode", envOr("TROY_REPORT_MODE", "0600"), "permissions of the report files written (folders get x where r is set) (env TROY_REPORT_MODE)")
	fl.StringVar(&f.format, "format", trace.FormatAuto, "input format: auto, troy, messages (OpenAI chat logs: a list, {messages}, tau-bench {traj}), or otlp (OTLP/JSON)")
	f.llm.register(cmd)
}

func (f *auditFlags) validate() error {
	if f.failOn != "" && policy.SeverityRank(f.failOn) == 0 {
		return fmt.Errorf("--fail-on %q: want one of critical, high, medium, low", f.failOn)
	}
	if !slices.Contains(trace.Formats, f.format) {
		return fmt.Errorf("--format %q: want one of %s", f.format, strings.Join(trace.Formats, ", "))
	}
	modes, err := report.ParseModes(f.reportMode)
	if err != nil {
		return fmt.Errorf("--report-mode: %w", err)
	}
	f.modes = modes
	if f.maxTraceBytes < 1 || f.maxSteps < 1 {
		return errors.New("--max-trace-bytes and --max-steps must be positive")
	}
	return nil
}

func loadPolicy(path string) (*policy.Engine, error) {
	p, err := policy.Load(path)
	if err != nil {
		return nil, err
	}
	e, err := policy.Compile(p)
	var pe *policy.Error
	if errors.As(err, &pe) {
		pe.Source = filepath.Base(path)
	}
	return e, err
}

func defaultOutDir() string { return filepath.Join("logs", time.Now().Format("2006-01-02")) }

func newAuditCmd(g *globalFlags) *cobra.Command {
	f := &auditFlags{}
	var mdPath, jsonPath string
	cmd := &cobra.Command{
		Use:   "audit TRACE POLICY",
		Short: "Audit one trace against a policy",
		Long: `Audit one trace file (JSON) against a policy file (YAML or JSON).

Writes the markdown report and audit.json (default logs/<date>/). Exit code:
0 audited, 1 the trace or policy was rejected, 2 --fail-on matched.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return codeError{exitError, err}
			}
			if mdPath == "" {
				mdPath = filepath.Join(defaultOutDir(), report.MarkdownFile)
			}
			if jsonPath == "" {
				jsonPath = filepath.Join(defaultOutDir(), report.JSONFile)
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return codeError{exitError, fmt.Errorf("read trace: %w", err)}
			}
			inputs := func(yield func(auditor.Input) bool) { yield(auditor.Input{Source: filepath.Base(args[0]), Data: data}) }
			var audit json.RawMessage
			sink := func(o auditor.Outcome) error {
				if o.Entry.Status != report.StatusAudited {
					return nil
				}
				audit = o.Audit
				return writeOutcome(o, mdPath, jsonPath, f.modes)
			}
			engine, err := loadPolicy(args[1])
			if err != nil {
				return codeError{exitError, err}
			}
			res, err := runAudit(cmd, g, f, engine, auditor.NewRun(), inputs, 1, nil, sink)
			if err != nil {
				return err
			}
			e := res.entries[0]
			out := cmd.OutOrStdout()
			if e.Status == report.StatusRejected {
				for _, p := range e.Problems {
					fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s: %s\n", e.Source, p)
				}
				return codeError{exitError, fmt.Errorf("%s was rejected: fix the problems above and audit again", e.Source)}
			}
			if f.jsonOut {
				out.Write(audit)
				fmt.Fprintln(out)
			} else {
				fmt.Fprintf(out, "%s: risk %d/100, violations: %s\nreport: %s\naudit:  %s\n", e.TraceID, e.RiskScore,
					report.SeverityLine(e.SeverityCounts), mdPath, jsonPath)
			}
			return res.exit(f)
		},
	}
	cmd.Flags().StringVarP(&mdPath, "output", "o", "", "markdown report path (default logs/<date>/report.md)")
	cmd.Flags().StringVarP(&jsonPath, "json-output", "j", "", "audit.json path (default logs/<date>/audit.json)")
	f.register(cmd)
	return cmd
}

// runState is kept in a batch's output folder while it runs, so the same
// command after a crash resumes the same run instead of starting over.
type runState struct {
	Run        string `json:"run"`
	PolicyHash string `json:"policy_hash"`
}

// Resume state in the output folder: the run, and a journal of the inputs
// whose report files are written (one report.Entry per line).
const (
	runStateFile   = ".troy-run.json"
	runJournalFile = ".troy-run.jsonl"
)

func resumeRun(outDir, policyHash string) (string, []report.Entry, bool) {
	b, err := os.ReadFile(filepath.Join(outDir, runStateFile))
	if err != nil {
		return "", nil, false
	}
	var st runState
	if json.Unmarshal(b, &st) != nil || st.PolicyHash != policyHash || st.Run == "" {
		return "", nil, false
	}
	var done []report.Entry
	if j, err := os.ReadFile(filepath.Join(outDir, runJournalFile)); err == nil {
		for _, line := range bytes.Split(j, []byte("\n")) {
			var e report.Entry
			if json.Unmarshal(line, &e) == nil && e.Source != "" { // a torn last line is skipped, and redone
				done = append(done, e)
			}
		}
	}
	return st.Run, done, true
}

func newAuditBatchCmd(g *globalFlags) *cobra.Command {
	f := &auditFlags{}
	var outDir string
	cmd := &cobra.Command{
		Use:   "audit-batch DIR POLICY",
		Short: "Audit every trace in a folder (.json files, and .jsonl with one trace per line)",
		Long: `Audit every .json trace in DIR, and every line of every .jsonl file, against a policy.

Writes D/summary.md, D/batch.json and D/<trace_id>/report.md + audit.json
(default D: logs/<date>/). A rejected trace never stops the batch. Run the same
command again after a crash and it resumes where it stopped. Exit code: 0 all
audited, 1 any input rejected (after every valid trace was audited), 2 --fail-on matched.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return codeError{exitError, err}
			}
			if outDir == "" {
				outDir = defaultOutDir()
			}
			files, total, err := auditor.ListDir(args[0])
			if err != nil {
				return codeError{exitError, err}
			}
			engine, err := loadPolicy(args[1])
			if err != nil {
				return codeError{exitError, err}
			}
			run, finished, resumed := resumeRun(outDir, engine.Hash())
			if !resumed {
				run = auditor.NewRun()
			}
			st, _ := json.Marshal(runState{Run: run, PolicyHash: engine.Hash()})
			if err := report.WriteFileAtomic(filepath.Join(outDir, runStateFile), st, f.modes); err != nil {
				return codeError{exitError, err}
			}
			flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
			if !resumed {
				flags |= os.O_TRUNC
			}
			journal, err := os.OpenFile(filepath.Join(outDir, runJournalFile), flags|syscall.O_NOFOLLOW, f.modes.File)
			if err != nil {
				return codeError{exitError, fmt.Errorf("resume journal: %w", err)}
			}
			defer journal.Close()
			if resumed {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: resuming interrupted run %s in %s (%d inputs already done)\n", run, outDir, len(finished))
			}
			sink := func(o auditor.Outcome) error {
				if o.Entry.Status == report.StatusAudited {
					dir, err := report.TraceDir(outDir, f.modes, o.Entry.TraceID)
					if err != nil {
						return err
					}
					if err := writeOutcome(o, filepath.Join(dir, report.MarkdownFile), filepath.Join(dir, report.JSONFile), f.modes); err != nil {
						return err
					}
				}
				line, _ := json.Marshal(o.Entry)
				if _, err := journal.Write(append(line, '\n')); err != nil {
					return fmt.Errorf("resume journal: %w", err)
				}
				return nil
			}
			started := time.Now()
			res, err := runAudit(cmd, g, f, engine, run, auditor.ReadDir(args[0], files, f.maxTraceBytes), total, finished, sink)
			if err != nil {
				return err
			}
			for i, e := range res.entries {
				if e.Status == report.StatusAudited {
					res.entries[i].Report = report.FileName(e.TraceID) + "/" + report.MarkdownFile
				}
			}
			b := report.NewBatch(engine.Policy().PolicyID, engine.Hash(), res.entries, started, time.Now())
			bj, _ := json.MarshalIndent(b, "", "  ")
			if err := report.WriteFileAtomic(filepath.Join(outDir, "batch.json"), append(bj, '\n'), f.modes); err != nil {
				return codeError{exitError, err}
			}
			if err := report.WriteFileAtomic(filepath.Join(outDir, "summary.md"), report.SummaryMarkdown(b), f.modes); err != nil {
				return codeError{exitError, err}
			}
			_ = os.Remove(filepath.Join(outDir, runStateFile))
			_ = os.Remove(filepath.Join(outDir, runJournalFile))
			out := cmd.OutOrStdout()
			if f.jsonOut {
				out.Write(bj)
				fmt.Fprintln(out)
			} else {
				fmt.Fprintf(out, "%d traces: %d audited, %d rejected; violations: %s\nsummary: %s\n", b.Traces, b.Audited, b.Rejected,
					report.SeverityLine(b.SeverityCounts), filepath.Join(outDir, "summary.md"))
			}
			for _, e := range res.entries {
				if e.Status == report.StatusRejected {
					fmt.Fprintf(cmd.ErrOrStderr(), "troy: rejected %s: %s\n", e.Source, firstOr(e.Problems, "unknown reason"))
				}
			}
			return res.exit(f)
		},
	}
	cmd.Flags().StringVar(&outDir, "out-dir", "", "output folder (default logs/<date>/)")
	cmd.Flags().IntVar(&f.window, "concurrency", 1024, "traces in the pipeline at once")
	f.register(cmd)
	return cmd
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}

// writeOutcome writes one trace's report files in place, not through a
// temporary file and rename: file creation dominates a batch on slow disks,
// and a file torn by a crash is rewritten when the run resumes, because the
// journal records an input only after its files are written.
func writeOutcome(o auditor.Outcome, mdPath, jsonPath string, m report.Modes) error {
	if err := report.WriteResponses(filepath.Dir(jsonPath), o.Responses, m); err != nil {
		return err
	}
	pretty, err := indent(o.Audit)
	if err != nil {
		pretty = o.Audit
	}
	if err := report.WriteFile(jsonPath, pretty, m); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := report.WriteFile(mdPath, o.Markdown, m); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func indent(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(raw) * 3 / 2)
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

type auditResult struct {
	entries []report.Entry
}

// exit turns the results into the documented exit code.
func (r auditResult) exit(f *auditFlags) error {
	rejected := 0
	failed := false
	for _, e := range r.entries {
		if e.Status == report.StatusRejected {
			rejected++
			continue
		}
		if f.failOn != "" && (score.Score{SeverityCounts: e.SeverityCounts}).AtOrAbove(f.failOn) {
			failed = true
		}
	}
	if failed {
		return codeError{exitViolation, fmt.Errorf("violations at or above %s found (--fail-on %s)", f.failOn, f.failOn)}
	}
	if rejected > 0 {
		return codeError{exitError, fmt.Errorf("%d input(s) rejected; every valid trace was still audited", rejected)}
	}
	return nil
}

// runAudit starts (or connects to) the pipeline, submits the inputs and
// collects one outcome per input.
func runAudit(cmd *cobra.Command, g *globalFlags, f *auditFlags, engine *policy.Engine, run string,
	inputs iter.Seq[auditor.Input], total int, finished []report.Entry, sink auditor.Sink) (auditResult, error) {
	log, err := g.logger(cmd.ErrOrStderr(), "warn")
	if err != nil {
		return auditResult{}, codeError{exitError, err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := stackConfig{client: g.client("troy-audit"), dataDir: g.dataDir,
		limits: trace.Limits{MaxBytes: f.maxTraceBytes, MaxSteps: f.maxSteps}}
	if g.natsURL == "" || f.withServices {
		cfg.targets = componentNames(kindStage)
		if cfg.llm, err = f.llm.resolve(cmd, cmd.ErrOrStderr()); err != nil {
			return auditResult{}, codeError{exitError, err}
		}
	}
	st, err := startStack(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		return auditResult{}, codeError{exitError, err}
	}
	defer func() {
		if err := st.Close(30 * time.Second); err != nil {
			log.Warn().Err(err).Msg("shutdown")
		}
	}()
	window := f.window
	if window < 1 {
		window = 1
	}
	prog := newProgress(cmd.OutOrStdout(), cmd.ErrOrStderr(), total)
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-st.Failed():
			cancel()
		case <-subCtx.Done():
		}
	}()
	entries, err := auditor.Submit(subCtx, st.js, auditor.Config{Run: run, Policy: engine, Window: window,
		IdleTimeout: f.timeout, Progress: prog.update, Finished: finished, Format: f.format}, inputs, total, sink)
	prog.finish()
	if err != nil {
		if serr := st.Err(); serr != nil {
			err = serr
		}
		if ctx.Err() != nil {
			return auditResult{}, codeError{exitError, errors.New("interrupted: run the same command again to resume")}
		}
		return auditResult{}, codeError{exitError, err}
	}
	if err := auditor.Forget(ctx, st.js, run); err != nil {
		log.Warn().Err(err).Msg("could not purge finished run from the outcomes stream; it expires with the stream's max age")
	}
	return auditResult{entries: entries}, nil
}
