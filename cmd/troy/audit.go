package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/auditor"
	"github.com/troy-audit/troy/pkg/natsembed"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/score"
	"github.com/troy-audit/troy/pkg/templates"
	"github.com/troy-audit/troy/pkg/trace"
)

// auditFlags are shared by audit and audit-batch.
type auditFlags struct {
	failOn        string
	window        int
	oneShot       bool // troy audit: one trace, nothing to resume
	timeout       time.Duration
	maxTraceBytes int
	maxSteps      int
	withServices  bool
	jsonOut       bool
	format        string
	reportMode    string
	modes         report.Modes
	llm           llmFlags
	junit, sarif  string // CI report files
	failOnRuleErr bool
	html          string // an HTML page of the audit, or of the batch
	formats       string
	perTraceHTML  bool // --formats has html: report.html beside each report.md
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
	fl.BoolVar(&f.failOnRuleErr, "fail-on-rule-error", false, "exit 1 when a rule could not be evaluated on some step (the audit still completes)")
	fl.StringVar(&f.html, "html", "", "also write a self-contained HTML page here: the audit (graph, timeline, violations, steps), or the batch (a sortable table linking to each trace)")
	fl.StringVar(&f.formats, "formats", "md,json", "report files per trace: md and json always, html adds report.html beside report.md")
	fl.StringVar(&f.junit, "junit", "", "also write JUnit XML here: a test suite per trace, a test case per rule, a failure per violation (for CI)")
	fl.StringVar(&f.sarif, "sarif", "", "also write SARIF 2.1.0 here: a result per violation at its trace file and step (for code-scanning dashboards)")
	f.llm.register(cmd)
}

// writeCIReports writes --junit and --sarif from the run's findings; root
// is the folder the trace files' sources are relative to.
func (f *auditFlags) writeCIReports(p *policy.Policy, findings []report.Findings, root string) error {
	if f.junit != "" {
		b, err := report.JUnit(p, findings)
		if err == nil {
			err = report.WriteFileAtomic(f.junit, b, f.modes)
		}
		if err != nil {
			return fmt.Errorf("--junit: %w", err)
		}
	}
	if f.sarif != "" {
		b, err := report.SARIF(p, findings, report.SARIFOptions{Root: root, Version: version,
			Read: func(source string) ([]byte, error) { // a trace file of its own, within the trace size limit
				path := filepath.Join(root, source)
				if st, err := os.Stat(path); err != nil || st.Size() > int64(f.maxTraceBytes) {
					return nil, fmt.Errorf("%s: not read", path)
				}
				return os.ReadFile(path)
			}})
		if err == nil {
			err = report.WriteFileAtomic(f.sarif, b, f.modes)
		}
		if err != nil {
			return fmt.Errorf("--sarif: %w", err)
		}
	}
	return nil
}

func writeHTML(path string, a *report.Audit, m report.Modes) error {
	b, err := report.HTML(a)
	if err != nil {
		return err
	}
	return report.WriteFileAtomic(path, b, m)
}

// writeBatchHTML writes report.html beside each trace's report.md (with
// --formats html) and the batch page (--html), whose rows link to each
// trace's report.html, or report.md without.
func (f *auditFlags) writeBatchHTML(outDir string, b *report.Batch) error {
	var rows []report.BatchRow
	pageDir := filepath.Dir(f.html)
	for _, e := range b.Entries {
		row := report.BatchRow{Entry: e}
		if e.Status == report.StatusAudited && e.Report != "" {
			traceDir := filepath.Join(outDir, filepath.Dir(filepath.FromSlash(e.Report)))
			target := filepath.Join(traceDir, report.MarkdownFile)
			if f.perTraceHTML {
				a, err := report.ReadAudit(filepath.Join(traceDir, report.JSONFile))
				if err != nil {
					return err
				}
				target = filepath.Join(traceDir, report.HTMLFile)
				if err := writeHTML(target, a, f.modes); err != nil {
					return err
				}
			}
			if rel, err := filepath.Rel(pageDir, target); err == nil {
				// folder names may hold %XX (report.FileName): escaped, so a
				// browser asks for the folder as it is named
				row.Link = (&url.URL{Path: filepath.ToSlash(rel)}).EscapedPath()
			}
		}
		rows = append(rows, row)
	}
	if f.html == "" {
		return nil
	}
	page, err := report.BatchHTML(b, rows)
	if err == nil {
		err = report.WriteFileAtomic(f.html, page, f.modes)
	}
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}

// batchFindings reads back what the CI formats need from each audited
// trace's audit.json in the batch folder.
func batchFindings(outDir string, entries []report.Entry) ([]report.Findings, error) {
	var out []report.Findings
	for _, e := range entries {
		if e.Status != report.StatusAudited {
			out = append(out, report.RejectedFindings(e))
			continue
		}
		f, err := report.ReadFindings(filepath.Join(outDir, filepath.Dir(filepath.FromSlash(e.Report)), report.JSONFile), e.Source)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func (f *auditFlags) validate() error {
	if f.failOn != "" && policy.SeverityRank(f.failOn) == 0 {
		return fmt.Errorf("--fail-on %q: want one of critical, high, medium, low", f.failOn)
	}
	if !slices.Contains(trace.Formats, f.format) {
		return fmt.Errorf("--format %q: want one of %s", f.format, strings.Join(trace.Formats, ", "))
	}
	for _, ft := range strings.Split(f.formats, ",") {
		switch strings.TrimSpace(ft) {
		case "md", "json":
		case "html":
			f.perTraceHTML = true
		default:
			return fmt.Errorf("--formats: %q is not a format: want md, json, html (md and json are always written)", ft)
		}
	}
	modes, err := report.ParseModes(f.reportMode)
	if err != nil {
		return fmt.Errorf("--report-mode: %w", err)
	}
	f.modes = modes
	if f.window < 1 {
		return fmt.Errorf("--concurrency %d: at least 1 trace must be in the pipeline", f.window)
	}
	if f.maxTraceBytes < 1 || f.maxSteps < 1 {
		return errors.New("--max-trace-bytes and --max-steps must be positive")
	}
	return nil
}

// loadPolicy reads a policy file, or names a bundled template (soc2,
// hipaa, …) when no such file is there.
func loadPolicy(path string) (*policy.Engine, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && slices.Contains(templates.Names(), path) {
		p, err := templates.Load(path)
		if err != nil {
			return nil, err
		}
		return policy.Compile(p)
	}
	l, err := policy.LoadEngine(path, policy.Options{})
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(path, `/\`) && filepath.Ext(path) == "" {
		return nil, fmt.Errorf("%w (nor is it a bundled template: %s)", err, strings.Join(templates.Names(), ", "))
	}
	var pe *policy.Error
	if errors.As(err, &pe) && looksLikeTrace(pe) {
		return nil, fmt.Errorf("%w\n%s looks like a trace, not a policy: is the order of the arguments right? (troy audit TRACE POLICY)", err, path)
	}
	if err != nil {
		return nil, err
	}
	if n := len(l.Translated); n > 0 {
		fmt.Fprintf(os.Stderr, "troy: %s: %s in the original tool's Python, translated into troy's language (troy policies import %s -o policy.yaml writes the translation)\n",
			path, plural(n, "condition is", "conditions are"), path)
	}
	return l.Engine, nil
}

// intoFolder is path/name when path names a folder, else path.
func intoFolder(path, name string) string {
	if path == "" {
		return path
	}
	if fi, err := os.Stat(path); (err == nil && fi.IsDir()) || strings.HasSuffix(path, string(filepath.Separator)) {
		return filepath.Join(path, name)
	}
	return path
}

// looksLikeTrace: a "policy" whose unknown fields are a trace's.
func looksLikeTrace(pe *policy.Error) bool {
	for _, p := range pe.Problems {
		if strings.Contains(p.Message, "unknown field") && (p.Field == "steps" || p.Field == "trace_id" || p.Field == "agent_name") {
			return true
		}
	}
	return false
}

func defaultOutDir() string { return filepath.Join("logs", time.Now().Format("2006-01-02")) }

func newAuditCmd(g *globalFlags) *cobra.Command {
	f := &auditFlags{window: 1, oneShot: true}
	var mdPath, jsonPath string
	cmd := &cobra.Command{
		Use:   "audit TRACE POLICY",
		Short: "Audit one trace against a policy",
		Long: `Audit one trace file (JSON) against a policy file (YAML or JSON).

Writes the markdown report and audit.json (default logs/<date>/<trace_id>/). Exit code:
0 audited, 1 the trace or policy was rejected, 2 --fail-on matched.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return codeError{exitError, err}
			}
			// by default each trace gets its own folder, logs/<date>/<trace_id>/,
			// as in a batch: a second audit the same day does not overwrite the first
			// a folder (existing, or written with a trailing /) takes the file
			// its usual name
			mdPath, jsonPath = intoFolder(mdPath, report.MarkdownFile), intoFolder(jsonPath, report.JSONFile)
			defaultMD, defaultJSON := mdPath == "", jsonPath == ""
			// one named file puts the other beside it
			if defaultJSON && !defaultMD {
				jsonPath, defaultJSON = filepath.Join(filepath.Dir(mdPath), report.JSONFile), false
			}
			if defaultMD && !defaultJSON {
				mdPath, defaultMD = filepath.Join(filepath.Dir(jsonPath), report.MarkdownFile), false
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
				if defaultMD || defaultJSON {
					dir, err := report.TraceDir(defaultOutDir(), f.modes, o.Entry.TraceID)
					if err != nil {
						return err
					}
					if defaultMD {
						mdPath = filepath.Join(dir, report.MarkdownFile)
					}
					if defaultJSON {
						jsonPath = filepath.Join(dir, report.JSONFile)
					}
				}
				return report.WriteReport(mdPath, jsonPath, o.Audit, o.Markdown, o.Responses, f.modes)
			}
			engine, err := loadPolicy(args[1])
			if err != nil {
				return codeError{exitError, err}
			}
			res, err := runAudit(cmd, g, f, 1, func(ctx context.Context, js jetstream.JetStream, progress func(int, int)) ([]report.Entry, error) {
				run := auditor.NewRun()
				entries, err := auditor.Submit(ctx, js, f.submitConfig(engine, run, progress), inputs, 1, sink)
				if err == nil {
					_ = auditor.Forget(ctx, js, run)
				}
				return entries, err
			})
			if err != nil {
				return err
			}
			e := res.entries[0]
			out := cmd.OutOrStdout()
			if e.Status == report.StatusRejected {
				for _, p := range e.Problems {
					fmt.Fprintf(cmd.ErrOrStderr(), "troy: %s: %s\n", e.Source, p)
				}
				// CI still gets its files, saying the input was not audited
				if err := f.writeCIReports(engine.Policy(), []report.Findings{report.RejectedFindings(e)}, filepath.Dir(args[0])); err != nil {
					return codeError{exitError, err}
				}
				return codeError{exitError, fmt.Errorf("%s was rejected: fix the problems above and audit again", e.Source)}
			}
			a, err := report.DecodeAudit(audit, e.Source)
			if err != nil {
				return codeError{exitError, err}
			}
			if f.junit != "" || f.sarif != "" || f.html != "" || f.perTraceHTML {
				if err := f.writeCIReports(engine.Policy(), []report.Findings{report.FindingsOf(e.Source, a)}, filepath.Dir(args[0])); err != nil {
					return codeError{exitError, err}
				}
				if f.perTraceHTML {
					if err := writeHTML(filepath.Join(filepath.Dir(mdPath), report.HTMLFile), a, f.modes); err != nil {
						return codeError{exitError, err}
					}
				}
				if f.html != "" {
					if err := writeHTML(f.html, a, f.modes); err != nil {
						return codeError{exitError, fmt.Errorf("--html: %w", err)}
					}
				}
			}
			// an LLM that could not explain (unreachable, refused) is said once,
			// not left to be found inside report.md
			if len(a.Warnings) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: explanations fell back to the heuristic: %s\n", a.Warnings[0])
			}
			if line := report.RuleErrorLine(e.RuleErrors); line != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: rule errors: %s\n", line)
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
	cmd.Flags().StringVarP(&mdPath, "output", "o", "", "markdown report path (default logs/<date>/<trace_id>/report.md; audit.json goes beside it unless -j)")
	cmd.Flags().StringVarP(&jsonPath, "json-output", "j", "", "audit.json path (default logs/<date>/<trace_id>/audit.json; report.md goes beside it unless -o)")
	f.register(cmd)
	return cmd
}

// BatchMemoryLimit is audit-batch's soft heap limit unless GOMEMLIMIT sets
// one: the heap of a long batch is a few hundred MB live, and with Go's
// default pacing (grow to twice the live heap) a 100k-trace batch peaked at
// 0.9 GiB; under this limit it stays below 0.5 GiB for ~6 % more time.
const BatchMemoryLimit = 420 << 20

func batchMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(BatchMemoryLimit)
	}
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
			if fi, err := os.Stat(args[0]); err == nil && !fi.IsDir() {
				return codeError{exitError, fmt.Errorf("%s is a file: audit-batch reads a folder of traces (troy audit %s POLICY audits one file)", args[0], args[0])}
			}
			batchMemoryLimit()
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
			var batch *auditor.BatchResult
			res, err := runAudit(cmd, g, f, total, func(ctx context.Context, js jetstream.JetStream, progress func(int, int)) ([]report.Entry, error) {
				cfg := auditor.BatchConfig{Config: f.submitConfig(engine, "", progress), OutDir: outDir, Modes: f.modes,
					Resumed: func(run string, done int) {
						fmt.Fprintf(cmd.ErrOrStderr(), "troy: resuming interrupted run %s in %s (%d inputs already done)\n", run, outDir, done)
					}}
				var err error
				if batch, err = auditor.RunBatch(ctx, js, cfg, auditor.ReadDir(args[0], files, f.maxTraceBytes), total); err != nil {
					return nil, err
				}
				return batch.Batch.Entries, nil
			})
			if err != nil {
				return err
			}
			b, bj := batch.Batch, batch.BatchJSON
			if f.html != "" || f.perTraceHTML {
				if err := f.writeBatchHTML(outDir, b); err != nil {
					return codeError{exitError, err}
				}
			}
			if f.junit != "" || f.sarif != "" {
				findings, err := batchFindings(outDir, b.Entries)
				if err == nil {
					err = f.writeCIReports(engine.Policy(), findings, args[0])
				}
				if err != nil {
					return codeError{exitError, err}
				}
			}
			out := cmd.OutOrStdout()
			if f.jsonOut {
				out.Write(bj)
			} else {
				fmt.Fprintf(out, "%d traces: %d audited, %d rejected; violations: %s\nsummary: %s\n", b.Traces, b.Audited, b.Rejected,
					report.SeverityLine(b.SeverityCounts), filepath.Join(outDir, auditor.SummaryFile))
			}
			if line := report.RuleErrorLine(b.RuleErrors); line != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: rule errors: %s (summary.md lists every rule)\n", line)
			}
			if batch.ForgetErr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "troy: could not purge the finished run from the outcomes stream (it expires with the stream's max age): %v\n", batch.ForgetErr)
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
	if f.failOnRuleErr {
		for _, e := range r.entries {
			if len(e.RuleErrors) > 0 {
				return codeError{exitError, fmt.Errorf("rules could not be evaluated on some steps (--fail-on-rule-error). %s", report.RuleErrorAdvice)}
			}
		}
	}
	if rejected > 0 {
		return codeError{exitError, fmt.Errorf("%s rejected; every valid trace was still audited", plural(rejected, "input", "inputs"))}
	}
	return nil
}

// submitConfig is the part of a submission the flags decide.
func (f *auditFlags) submitConfig(engine *policy.Engine, run string, progress func(int, int)) auditor.Config {
	return auditor.Config{Run: run, Policy: engine, Window: max(f.window, 1), IdleTimeout: f.timeout, Progress: progress, Format: f.format}
}

// runAudit starts (or connects to) the pipeline, runs fn against it with a
// progress display, and turns what it returns into the exit code.
func runAudit(cmd *cobra.Command, g *globalFlags, f *auditFlags, total int,
	fn func(ctx context.Context, js jetstream.JetStream, progress func(int, int)) ([]report.Entry, error)) (auditResult, error) {
	log, err := g.logger(cmd.ErrOrStderr(), "warn")
	if err != nil {
		return auditResult{}, codeError{exitError, err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := stackConfig{client: g.client("troy-audit"), dataDir: g.dataDir, noProvision: g.noProvision,
		limits: trace.Limits{MaxBytes: f.maxTraceBytes, MaxSteps: f.maxSteps}}
	if g.natsURL == "" || f.withServices {
		cfg.targets = componentNames(kindStage)
		if cfg.llm, err = f.llm.resolve(cmd, cmd.ErrOrStderr()); err != nil {
			return auditResult{}, codeError{exitError, err}
		}
	}
	st, err := startStack(ctx, cfg, log, prometheus.NewRegistry())
	if errors.Is(err, natsembed.ErrStoreLocked) && f.oneShot && !cmd.Flags().Changed("data-dir") && os.Getenv("TROY_DATA_DIR") == "" {
		// one trace needs no store to resume from: audits run side by side
		// (xargs -P, parallel CI jobs) each get a throwaway one
		tmp, terr := os.MkdirTemp("", "troy-audit-")
		if terr != nil {
			return auditResult{}, codeError{exitError, terr}
		}
		defer os.RemoveAll(tmp)
		cfg.dataDir = tmp
		st, err = startStack(ctx, cfg, log, prometheus.NewRegistry())
	}
	if err != nil {
		return auditResult{}, codeError{exitError, err}
	}
	defer func() {
		if err := st.Close(30 * time.Second); err != nil {
			log.Warn().Err(err).Msg("shutdown")
		}
	}()
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
	entries, err := fn(subCtx, st.js, prog.update)
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
	return auditResult{entries: entries}, nil
}
