package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a bar when stdout is a terminal and plain lines (on stderr,
// at most every two seconds) otherwise.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	plain io.Writer
	total int
	last  time.Time
	done  int
}

func newProgress(stdout, stderr io.Writer, total int) *progress {
	p := &progress{total: total, plain: stderr, last: time.Now()}
	if total > 1 && isTerminal(stdout) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("auditing"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("traces"),
			progressbar.OptionClearOnFinish())
	}
	return p
}

func (p *progress) update(done, _ int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	if p.bar != nil {
		_ = p.bar.Set(done)
		return
	}
	if p.total > 1 && time.Since(p.last) >= 2*time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.plain, "progress: %d/%d traces\n", done, p.total)
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// plural is "1 rule" or "3 rules": n with the word that fits it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
