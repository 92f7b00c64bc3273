package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/pflag"
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

// span is a duration flag that also takes days and weeks (7d, 2w, 1d12h):
// how far back people think when they look at findings and runs.
type span struct{ d *time.Duration }

func spanVar(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(span{p}, name, usage)
}

func (s span) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s span) Type() string { return "duration" }

func (s span) Set(v string) error {
	var total time.Duration
	rest := v
	for _, unit := range []struct {
		suffix string
		size   time.Duration
	}{{"w", 7 * 24 * time.Hour}, {"d", 24 * time.Hour}} {
		if i := strings.Index(rest, unit.suffix); i >= 0 {
			n, err := strconv.Atoi(rest[:i])
			if err != nil || n < 0 || n > 10000 { // 10,000 weeks is past any retention
				return errors.New("write a duration such as 90m, 12h, 7d or 2w")
			}
			total += time.Duration(n) * unit.size
			rest = rest[i+1:]
		}
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil || strings.HasPrefix(rest, "-") {
			return errors.New("write a duration such as 90m, 12h, 7d or 2w")
		}
		total += d
	}
	if total < 0 {
		return errors.New("a duration back in time is positive")
	}
	*s.d = total
	return nil
}
