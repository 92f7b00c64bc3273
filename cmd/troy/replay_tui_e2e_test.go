package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tmuxScreen runs a command in a real terminal (a detached tmux session on
// its own server) and lets a test type keys and read the screen.
type tmuxScreen struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T, dir string, width, height int, command ...string) *tmuxScreen {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed (make test installs it when it can)")
	}
	// a server of its own: concurrent runs never share a session
	s := &tmuxScreen{t: t, socket: fmt.Sprintf("troy-test-%d-%d", os.Getpid(), rand.Int64())}
	args := []string{"new-session", "-d", "-s", "t", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), "-c", dir,
		strings.Join(quoteAll(command), " ") + "; echo '[exited]'; sleep 60"}
	s.run(args...)
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	return s
}

func (s *tmuxScreen) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.socket, "-f", os.DevNull}, args...)...).CombinedOutput()
	require.NoError(s.t, err, "tmux %v: %s", args, out)
	return string(out)
}

// keys types keys (tmux names: Down, Tab, Enter, or text).
func (s *tmuxScreen) keys(keys ...string) {
	s.run(append([]string{"send-keys", "-t", "t"}, keys...)...)
}

// waitFor returns the screen once it shows every want, failing after 10 s.
func (s *tmuxScreen) waitFor(want ...string) string {
	s.t.Helper()
	var screen string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		screen = s.run("capture-pane", "-p", "-t", "t")
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(screen, w)
		}
		if ok {
			return screen
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("the screen never showed %q:\n%s", want, screen)
	return ""
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// troy replay in a real terminal: it opens on the first step, moves, jumps
// to the violations, switches to the second policy and shows what it adds
// and drops, filters by rule, searches, and quits.
func TestReplayViewerInATerminal(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "audit", filepath.Join(traces, "support_bot.json"), policy, "-j", "a.json", "-o", "r.md")
	require.Equal(t, 0, r.code, r.stderr)
	narrower := "policy_id: narrower\nrules:\n  - rule_id: pii-exfiltration\n    description: same rule\n    condition: \"get(step, 'metadata.data_classification') == 'pii'\"\n    severity: critical\n    weight: 50\n  - rule_id: any-http\n    description: any HTTP post\n    condition: step.name == 'http_post'\n    severity: low\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "narrower.yaml"), []byte(narrower), 0o644))

	s := newTmux(t, dir, 120, 30, troyBin, "replay", "a.json", "--policy", "narrower.yaml")
	s.waitFor("trace support-bot-pii-exfil-001", "step 0 · s1 · llm_call gpt-4o-mini", "recorded troy-examples", "narrower")

	s.keys("Down")
	s.waitFor("step 1 · s2 · tool_call crm_lookup", "CRITICAL  pii-exfiltration", "why: The agent called the tool crm_lookup")

	s.keys("n") // the next violation: the http_post
	s.waitFor("step 3 · s4 · tool_call http_post", "HIGH  external-call-after-pii")

	s.keys("Tab") // the second policy: what it adds and drops here
	s.waitFor("+ narrower", "adds any-http (low)", "drops external-call-after-pii (high)", "LOW  any-http: any HTTP post")

	s.keys("f", "any-http", "Enter") // only the steps where that rule fired
	screen := s.waitFor(`filter "any-http"`, "1 of 5 steps")
	require.NotContains(t, screen, "crm_lookup", "the other steps are filtered out")

	s.keys("f", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "Enter", "/", "refund_status", "Enter")
	screen = s.waitFor(`filter "" search "refund_status": 1 of 5 steps`, "step 2 · s3 · tool_call refund_status")
	require.NotContains(t, screen, "crm_lookup", "the search keeps only the matching step")

	s.keys("q")
	s.waitFor("[exited]")
}
