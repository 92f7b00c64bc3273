package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits of execute_code.
const (
	MaxCodeOutput      = 20_000
	DefaultCodeTimeout = 30 * time.Second
	MaxCodeTimeout     = 300 * time.Second
)

// EnvAllowlist is the environment a child process keeps; everything else
// (API keys, tokens) is stripped.
var EnvAllowlist = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// Backend runs code. The subprocess backend is the default; a container
// backend plugs in here.
type Backend interface {
	Exec(ctx context.Context, language, code, workspace string) (output string, truncated bool, exitCode int, err error)
}

// ErrNoInterpreter says the language's interpreter is not installed.
var ErrNoInterpreter = errors.New("interpreter not found")

// ExecuteCode runs Python or bash in the workspace.
type ExecuteCode struct {
	Backend Backend // nil: Subprocess
}

type codeArgs struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	TimeoutS int    `json:"timeout_s"`
}

// Spec implements Tool.
func (ExecuteCode) Spec() Spec {
	return Spec{
		Name:        "execute_code",
		Description: "Run a Python or bash program in the workspace and return its exit code and output (stdout and stderr together).",
		Safety:      ExecutesCode,
		Returns:     "[exit code N] and the output",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["language","code"],
 "properties":{
  "language":{"type":"string","enum":["python","bash"]},
  "code":{"type":"string","minLength":1},
  "timeout_s":{"type":"integer","minimum":1,"maximum":300,"default":30}}}`),
	}
}

func parseCode(raw json.RawMessage) codeArgs {
	var a codeArgs
	_ = json.Unmarshal(raw, &a)
	if a.TimeoutS <= 0 {
		a.TimeoutS = int(DefaultCodeTimeout / time.Second)
	}
	return a
}

// Timeout implements Timed: the program's own limit and a margin to kill it
// and collect what it printed, so the registry never gives up first.
func (ExecuteCode) Timeout(raw json.RawMessage) time.Duration {
	return time.Duration(parseCode(raw).TimeoutS)*time.Second + 5*time.Second
}

// Run implements Tool.
func (t ExecuteCode) Run(ctx context.Context, env *Env, raw json.RawMessage) (Output, *Error) {
	a := parseCode(raw)
	if env.Root == nil {
		return Output{}, Errorf(Internal, "execute_code: the run has no workspace")
	}
	be := t.Backend
	if be == nil {
		be = Subprocess{}
	}
	limit := time.Duration(a.TimeoutS) * time.Second
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out, truncated, code, err := be.Exec(cctx, a.Language, a.Code, env.Root.Name())
	switch {
	case errors.Is(err, ErrNoInterpreter):
		return Output{}, Errorf(DependencyMissing, "%s is not installed on this machine: %v", a.Language, err)
	case cctx.Err() != nil && ctx.Err() == nil:
		return Output{}, Errorf(Timeout, "Execution exceeded %ds and was terminated.", a.TimeoutS).
			Fix("Make the program faster, or raise timeout_s (at most 300).").With("partial_output", out)
	case ctx.Err() != nil:
		return Output{}, Errorf(Internal, "Execution was stopped with the run.").With("partial_output", out)
	case err != nil:
		return Output{}, Errorf(ExecutionFailed, "%s could not run: %v", a.Language, err)
	case code != 0:
		return Output{}, Errorf(ExecutionFailed, "%s exited with code %d.", a.Language, code).
			With("output", out).With("exit_code", code)
	}
	return Output{Content: fmt.Sprintf("[exit code 0]\n%s", out), Truncated: truncated,
		Data: map[string]any{"exit_code": 0}}, nil
}

// Subprocess runs code as a child process in its own process group and,
// where the kernel allows it, its own user and PID namespaces: the program
// is PID 1 of its namespace, so when it ends or is killed every process it
// started ends too, including ones that left its group with setsid. Limits
// (CPU 30 s, address space 1 GiB, 256 files, 50 MB file size) are set by
// the shell that execs the interpreter, and the environment is stripped to
// EnvAllowlist. troy marks itself not dumpable, so a program running as
// troy's (non-root) user cannot read troy's environment through /proc.
// It is not a jail: the program can read what troy's user can, and reach
// the network.
type Subprocess struct{}

var (
	hardenOnce sync.Once
	// namespaces is cleared when the kernel refuses them; the process group
	// is then the only boundary.
	namespaces atomic.Bool
)

func harden() {
	hardenOnce.Do(func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
		namespaces.Store(true)
	})
}

func sysProcAttr(isolated bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if isolated {
		uid, gid := os.Getuid(), os.Getgid()
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	}
	return a
}

// rlimitShell sets the limits one at a time (POSIX sh's ulimit takes one
// option per call), then replaces itself with the interpreter. A limit the
// system refuses is skipped: best effort, as the doc says.
const rlimitShell = `ulimit -t 30 2>/dev/null; ulimit -v 1048576 2>/dev/null; ulimit -n 256 2>/dev/null; ulimit -f 102400 2>/dev/null; exec "$@"`

// Exec implements Backend.
func (Subprocess) Exec(ctx context.Context, language, code, workspace string) (string, bool, int, error) {
	var argv []string
	switch language {
	case "python":
		py, err := exec.LookPath("python3")
		if err != nil {
			return "", false, -1, fmt.Errorf("%w: python3", ErrNoInterpreter)
		}
		argv = []string{py, "-c", code}
	case "bash":
		sh, err := exec.LookPath("bash")
		if err != nil {
			return "", false, -1, fmt.Errorf("%w: bash", ErrNoInterpreter)
		}
		argv = []string{sh, "-c", code}
	default:
		return "", false, -1, fmt.Errorf("unsupported language %q", language)
	}
	harden()
	buf := &clipBuffer{max: MaxCodeOutput}
	start := func(isolated bool) (*exec.Cmd, error) {
		cmd := exec.Command("/bin/sh", append([]string{"-c", rlimitShell, "troy-exec"}, argv...)...)
		cmd.Dir = workspace
		cmd.Env = allowedEnv()
		cmd.SysProcAttr = sysProcAttr(isolated)
		cmd.Stdout, cmd.Stderr = buf, buf
		// Once the program exits, its output is read for at most this
		// long: a background child still holding the pipe does not hold
		// the call.
		cmd.WaitDelay = 200 * time.Millisecond
		return cmd, cmd.Start()
	}
	cmd, err := start(namespaces.Load())
	if err != nil && namespaces.Load() && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES)) {
		namespaces.Store(false) // no user namespaces here: the process group alone
		cmd, err = start(false)
	}
	if err != nil {
		return "", false, -1, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		// The whole group: a shell's children die with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-waited
	}
	// Children left behind by a program that exited go too (all but one
	// that left the group with setsid: this backend is not a jail).
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	out, trunc := buf.String()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, trunc, ee.ExitCode(), nil
	}
	if errors.Is(err, exec.ErrWaitDelay) { // exited; a child kept the pipe
		return out, trunc, cmd.ProcessState.ExitCode(), nil
	}
	return out, trunc, 0, err
}

func allowedEnv() []string {
	var env []string
	for _, k := range EnvAllowlist {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// clipBuffer keeps the first max bytes written and counts the rest.
type clipBuffer struct {
	mu      sync.Mutex
	b       []byte
	max     int
	dropped int
}

func (c *clipBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - len(c.b)
	if room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	if len(p) > room {
		c.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (c *clipBuffer) String() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped > 0 {
		return string(c.b) + "\n[output truncated]", true
	}
	return string(c.b), false
}
