package auditor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/report"
)

// Resume state in a batch's output folder while it runs: the run, and a
// journal of the inputs whose report files are written (one report.Entry a
// line). The same command after a crash resumes the run from them.
const (
	StateFile   = ".troy-run.json"
	JournalFile = ".troy-run.jsonl"
)

// Batch files beside the trace folders.
const (
	BatchFile   = "batch.json"
	SummaryFile = "summary.md"
)

// BatchConfig describes one batch run into a folder.
type BatchConfig struct {
	Config        // Run and Finished are set by RunBatch
	OutDir string // summary.md, batch.json, <trace_id>/{report.md,audit.json}
	Modes  report.Modes
	// Resumed is told when the folder holds an interrupted run of the same
	// policy, which this one continues.
	Resumed func(run string, done int)
}

// BatchResult is a finished batch.
type BatchResult struct {
	Batch     *report.Batch
	BatchJSON []byte // what batch.json holds
	Run       string
	// ForgetErr is why the finished run's outcomes could not be purged from
	// their stream (they expire with its max age).
	ForgetErr error
}

// RunBatch owns a batch end to end: it resumes the run the folder holds
// (same policy) or starts one, submits the inputs, writes each audited
// trace's report files and journals it, then writes batch.json and
// summary.md and clears the resume state. Killed at any point, the same
// call resumes and ends with one report per input.
func RunBatch(ctx context.Context, js jetstream.JetStream, cfg BatchConfig, inputs iter.Seq[Input], total int) (*BatchResult, error) {
	hash := cfg.Policy.Hash()
	run, finished, resumed := resume(cfg.OutDir, hash)
	if !resumed {
		run = NewRun()
	}
	state, _ := json.Marshal(struct {
		Run        string `json:"run"`
		PolicyHash string `json:"policy_hash"`
	}{run, hash})
	if err := report.WriteFileAtomic(filepath.Join(cfg.OutDir, StateFile), state, cfg.Modes); err != nil {
		return nil, err
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	if !resumed {
		flags |= os.O_TRUNC
	}
	journal, err := os.OpenFile(filepath.Join(cfg.OutDir, JournalFile), flags, cfg.Modes.File)
	if err != nil {
		return nil, fmt.Errorf("resume journal: %w", err)
	}
	defer journal.Close()
	if resumed && cfg.Resumed != nil {
		cfg.Resumed(run, len(finished))
	}
	var mu sync.Mutex // a dead-lettered input's outcome may come from another goroutine
	sink := func(o Outcome) error {
		if o.Entry.Status == report.StatusAudited {
			dir, err := report.TraceDir(cfg.OutDir, cfg.Modes, o.Entry.TraceID)
			if err != nil {
				return err
			}
			if err := report.WriteReport(filepath.Join(dir, report.MarkdownFile), filepath.Join(dir, report.JSONFile),
				o.Audit, o.Markdown, o.Responses, cfg.Modes); err != nil {
				return err
			}
		}
		line, _ := json.Marshal(o.Entry)
		mu.Lock()
		defer mu.Unlock()
		if _, err := journal.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("resume journal: %w", err)
		}
		return nil
	}
	started := time.Now()
	sub := cfg.Config
	sub.Run, sub.Finished = run, finished
	entries, err := Submit(ctx, js, sub, inputs, total, sink)
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		if e.Status == report.StatusAudited {
			entries[i].Report = report.FileName(e.TraceID) + "/" + report.MarkdownFile
		}
	}
	b := report.NewBatch(cfg.Policy.Policy().PolicyID, hash, entries, started, time.Now())
	bj, _ := json.MarshalIndent(b, "", "  ")
	bj = append(bj, '\n')
	if err := report.WriteFileAtomic(filepath.Join(cfg.OutDir, BatchFile), bj, cfg.Modes); err != nil {
		return nil, err
	}
	if err := report.WriteFileAtomic(filepath.Join(cfg.OutDir, SummaryFile), report.SummaryMarkdown(b), cfg.Modes); err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(cfg.OutDir, StateFile))
	_ = os.Remove(filepath.Join(cfg.OutDir, JournalFile))
	return &BatchResult{Batch: b, BatchJSON: bj, Run: run, ForgetErr: Forget(ctx, js, run)}, nil
}

// resume reads the folder's resume state: the run and the inputs already
// done, when it was started with the same policy.
func resume(outDir, policyHash string) (string, []report.Entry, bool) {
	b, err := os.ReadFile(filepath.Join(outDir, StateFile))
	if err != nil {
		return "", nil, false
	}
	var st struct {
		Run        string `json:"run"`
		PolicyHash string `json:"policy_hash"`
	}
	if json.Unmarshal(b, &st) != nil || st.PolicyHash != policyHash || st.Run == "" {
		return "", nil, false
	}
	var done []report.Entry
	if j, err := os.ReadFile(filepath.Join(outDir, JournalFile)); err == nil {
		for _, line := range bytes.Split(j, []byte("\n")) {
			var e report.Entry
			if json.Unmarshal(line, &e) == nil && e.Source != "" { // a torn last line is skipped, and redone
				done = append(done, e)
			}
		}
	}
	return st.Run, done, true
}
