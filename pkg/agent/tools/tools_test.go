package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEnv(t *testing.T) (*Env, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	return &Env{Root: root, Scratchpad: map[string]any{}}, dir
}

func registry(t *testing.T, ts ...Tool) *Registry {
	t.Helper()
	if len(ts) == 0 {
		ts = []Tool{FileSystem{}, Scratchpad{}, Submit{}, ExecuteCode{}, LoadSkill{}}
	}
	r, err := NewRegistry(ts...)
	require.NoError(t, err)
	return r
}

func call(t *testing.T, r *Registry, env *Env, name string, args any) Result {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return r.Invoke(context.Background(), env, Call{ID: "c1", Name: name, Arguments: b})
}

func TestErrorModel(t *testing.T) {
	terminal := map[Code]bool{UnsafeOperation: true, PolicyViolation: true, SafetyFallback: true, ApprovalDenied: true, DependencyMissing: true}
	require.Len(t, Codes, 12)
	for _, c := range Codes {
		assert.Equal(t, !terminal[c], c.Retryable(), c)
	}
	e := Errorf(PolicyViolation, "no").Fix("do else").With("rules", "R1")
	assert.Equal(t, "ERROR [policy_violation]: no\nHow to fix: do else\nDo not retry this call as-is. Change your approach.\n  rules: R1", e.ModelText())
}

func TestRegistry(t *testing.T) {
	_, err := NewRegistry(Submit{}, Submit{})
	require.ErrorContains(t, err, "unique")

	r := registry(t)
	env, _ := newEnv(t)
	res := call(t, r, env, "nope", map[string]any{})
	require.False(t, res.OK)
	assert.Equal(t, NotFound, res.Err.Code)
	assert.Contains(t, res.Err.Remediation, "execute_code, file_system, load_skill, scratchpad, submit")

	res = call(t, r, env, "file_system", map[string]any{"operation": "write", "path": "a", "content": 3})
	require.False(t, res.OK)
	assert.Equal(t, InvalidInput, res.Err.Code)
	assert.Contains(t, res.Err.Message, "`content`")
	assert.True(t, res.Err.Retryable)

	res = r.Invoke(context.Background(), env, Call{ID: "x", Name: "submit", Arguments: json.RawMessage(`{bad`)})
	assert.Equal(t, InvalidInput, res.Err.Code)
}

type panicky struct{}

func (panicky) Spec() Spec {
	return Spec{Name: "boom", InputSchema: json.RawMessage(`{"type":"object"}`)}
}
func (panicky) Run(context.Context, *Env, json.RawMessage) (Output, *Error) { panic("kaboom") }

type sleepy struct{ stopped chan struct{} }

func (sleepy) Spec() Spec {
	return Spec{Name: "sleepy", InputSchema: json.RawMessage(`{"type":"object"}`)}
}
func (s sleepy) Run(ctx context.Context, _ *Env, _ json.RawMessage) (Output, *Error) {
	<-ctx.Done()
	close(s.stopped)
	return Output{Content: "late"}, nil
}

func TestRegistryPanicAndTimeout(t *testing.T) {
	s := sleepy{stopped: make(chan struct{})}
	r := registry(t, panicky{}, s)
	r.DefaultTimeout = 50 * time.Millisecond
	env, _ := newEnv(t)
	res := call(t, r, env, "boom", map[string]any{})
	assert.Equal(t, Internal, res.Err.Code)
	assert.Contains(t, res.Err.Message, "kaboom")

	res = call(t, r, env, "sleepy", map[string]any{})
	require.False(t, res.OK, "a result returned only because the tool was stopped is a timeout")
	assert.Equal(t, Timeout, res.Err.Code)
	select {
	case <-s.stopped: // the registry returned only after the tool stopped
	default:
		t.Fatal("the registry answered before the tool stopped")
	}
}

// Scenario 22 of the reference: sandbox escapes without guardrails.
func TestFileSystemSandbox(t *testing.T) {
	r := registry(t)
	env, dir := newEnv(t)
	outside := filepath.Join(t.TempDir(), "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("secret"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link.txt")))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "linkdir")))
	for _, p := range []string{"/etc/passwd", "../outside.txt", "a/../../outside.txt", "link.txt", "linkdir/outside.txt"} {
		for _, op := range []string{"read", "write", "delete", "stat"} {
			args := map[string]any{"operation": op, "path": p}
			if op == "write" {
				args["content"] = "x"
			}
			if op == "delete" && p == "link.txt" {
				continue // deleting the link itself stays inside: checked below
			}
			res := call(t, r, env, "file_system", args)
			require.False(t, res.OK, "%s %s", op, p)
			assert.Equal(t, UnsafeOperation, res.Err.Code, "%s %s: %s", op, p, res.Err.Message)
			assert.Contains(t, res.Err.Message, "Path escapes the workspace sandbox")
			assert.False(t, res.Err.Retryable)
		}
	}
	res := call(t, r, env, "file_system", map[string]any{"operation": "delete", "path": "link.txt"})
	require.True(t, res.OK)
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "secret", string(b))

	res = call(t, r, env, "file_system", map[string]any{"operation": "write", "path": "d/e/f.txt", "content": "héllo"})
	require.True(t, res.OK, res.ModelText())
	assert.Equal(t, "Wrote 5 characters to d/e/f.txt", res.Content)
	res = call(t, r, env, "file_system", map[string]any{"operation": "read", "path": "d/e/f.txt"})
	assert.Equal(t, "héllo", res.Content)
	res = call(t, r, env, "file_system", map[string]any{"operation": "delete", "path": "d"})
	assert.Equal(t, UnsafeOperation, res.Err.Code)
	assert.Contains(t, res.Err.Message, "non-empty directory")
	res = call(t, r, env, "file_system", map[string]any{"operation": "delete", "path": "d", "recursive": true})
	require.True(t, res.OK)
	assert.NoDirExists(t, filepath.Join(dir, "d"))
	res = call(t, r, env, "file_system", map[string]any{"operation": "read", "path": "missing.txt"})
	assert.Equal(t, NotFound, res.Err.Code)
	assert.Equal(t, "No such file: missing.txt", res.Err.Message)
	assert.True(t, res.Err.Retryable)
	res = call(t, r, env, "file_system", map[string]any{"operation": "write", "path": "x"})
	assert.Equal(t, InvalidInput, res.Err.Code)
}

func TestFileSystemListAndRead(t *testing.T) {
	r := registry(t)
	env, dir := newEnv(t)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.csv"), []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "c.csv"), []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("x", MaxReadBytes+10)), 0o644))
	res := call(t, r, env, "file_system", map[string]any{"operation": "list", "path": "."})
	assert.Equal(t, "b.csv\nbig.txt\nsub/", res.Content)
	res = call(t, r, env, "file_system", map[string]any{"operation": "glob", "path": ".", "pattern": "**.csv"})
	assert.Equal(t, "b.csv\nsub/c.csv", res.Content)
	res = call(t, r, env, "file_system", map[string]any{"operation": "glob", "path": ".", "pattern": "*.json"})
	assert.Equal(t, "(no matches)", res.Content)
	res = call(t, r, env, "file_system", map[string]any{"operation": "read", "path": "big.txt"})
	assert.True(t, res.Truncated)
	assert.Len(t, res.Content, MaxReadBytes)
	assert.True(t, strings.HasSuffix(res.ModelText(), "[output truncated]"))
	res = call(t, r, env, "file_system", map[string]any{"operation": "stat", "path": "b.csv"})
	assert.True(t, strings.HasPrefix(res.Content, "file, 1 bytes, modified "), res.Content)
}

func TestSubmitAndScratchpad(t *testing.T) {
	r := registry(t)
	env, _ := newEnv(t)
	res := call(t, r, env, "submit", map[string]any{"answer": "a", "status": "complete", "confidence": 1, "unmet_requirements": []string{"x"}})
	assert.Equal(t, InvalidInput, res.Err.Code)
	assert.Nil(t, env.Submitted)
	res = call(t, r, env, "submit", map[string]any{"answer": "a", "status": "partial", "confidence": 0.5})
	require.True(t, res.OK)
	assert.Equal(t, "Submitted with status=partial.", res.Content)
	assert.Equal(t, &Submission{Answer: "a", Status: "partial", Confidence: 0.5, Evidence: []string{}, UnmetRequirements: []string{}}, env.Submitted)

	env.Scratchpad["_cost_usd"] = 0.5
	res = call(t, r, env, "scratchpad", map[string]any{"action": "write", "key": "_cost_usd", "value": 0})
	assert.Equal(t, UnsafeOperation, res.Err.Code)
	assert.Contains(t, res.Err.Message, "reserved")
	res = call(t, r, env, "scratchpad", map[string]any{"action": "read", "key": "_cost_usd"})
	assert.Equal(t, "0.5", res.Content)
	res = call(t, r, env, "scratchpad", map[string]any{"action": "write", "key": "k", "value": "v"})
	assert.Equal(t, "Stored `k`.", res.Content)
	res = call(t, r, env, "scratchpad", map[string]any{"action": "list"})
	assert.Equal(t, "k", res.Content)
}

// Scenario 23 of the reference: execute_code outcomes.
func TestExecuteCode(t *testing.T) {
	r := registry(t)
	env, _ := newEnv(t)
	res := call(t, r, env, "execute_code", map[string]any{"language": "python", "code": "print('hi')"})
	require.True(t, res.OK, res.ModelText())
	assert.Equal(t, "[exit code 0]\nhi\n", res.Content)

	res = call(t, r, env, "execute_code", map[string]any{"language": "python", "code": "import sys; print('x'); sys.exit(3)"})
	assert.Equal(t, ExecutionFailed, res.Err.Code)
	assert.Equal(t, "python exited with code 3.", res.Err.Message)
	assert.Equal(t, "x\n", res.Err.Details["output"])

	res = call(t, r, env, "execute_code", map[string]any{"language": "bash", "code": "printf '%25000s' x"})
	require.True(t, res.OK)
	assert.True(t, res.Truncated)

	t.Setenv("TROY_TEST_SECRET", "hunter2")
	res = call(t, r, env, "execute_code", map[string]any{"language": "bash", "code": "env"})
	require.True(t, res.OK)
	assert.NotContains(t, res.Content, "hunter2")
}

// The timeout kills the whole process group: a background grandchild that
// would write a file later never does.
func TestExecuteCodeTimeoutKillsTheGroup(t *testing.T) {
	r := registry(t)
	env, dir := newEnv(t)
	start := time.Now()
	res := call(t, r, env, "execute_code", map[string]any{"language": "bash", "timeout_s": 1,
		"code": "echo started; (sleep 2; echo late > late.txt) & sleep 10"})
	require.False(t, res.OK)
	assert.Equal(t, Timeout, res.Err.Code)
	assert.Equal(t, "Execution exceeded 1s and was terminated.", res.Err.Message)
	assert.Contains(t, res.Err.Details["partial_output"], "started")
	assert.Less(t, time.Since(start), 5*time.Second)
	time.Sleep(1500 * time.Millisecond) // past when the grandchild would have written
	assert.NoFileExists(t, filepath.Join(dir, "late.txt"))
}

// The rlimits apply (one ulimit per limit: POSIX sh takes one at a time),
// and a background child that keeps the output pipe does not hold the call.
func TestExecuteCodeLimitsAndBackgroundChildren(t *testing.T) {
	r := registry(t)
	env, _ := newEnv(t)
	res := call(t, r, env, "execute_code", map[string]any{"language": "bash", "code": "ulimit -n; ulimit -t; ulimit -v"})
	require.True(t, res.OK, res.ModelText())
	assert.Equal(t, "[exit code 0]\n256\n30\n1048576\n", res.Content)

	start := time.Now()
	res = call(t, r, env, "execute_code", map[string]any{"language": "bash", "timeout_s": 5, "code": "echo hi; sleep 30 &"})
	require.True(t, res.OK, res.ModelText())
	assert.Equal(t, "[exit code 0]\nhi\n", res.Content)
	assert.Less(t, time.Since(start), 3*time.Second)
}

func TestFileSystemSpecialFiles(t *testing.T) {
	r := registry(t)
	env, dir := newEnv(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "ff"), 0o644))
	start := time.Now()
	res := call(t, r, env, "file_system", map[string]any{"operation": "read", "path": "ff"})
	require.False(t, res.OK)
	assert.Equal(t, UnsafeOperation, res.Err.Code)
	res = call(t, r, env, "file_system", map[string]any{"operation": "write", "path": "ff", "content": "x"})
	require.False(t, res.OK)
	assert.Less(t, time.Since(start), 2*time.Second, "a FIFO never blocks the call")

	outside := filepath.Join(t.TempDir(), "o.txt")
	require.NoError(t, os.WriteFile(outside, []byte("SECRET"), 0o600))
	require.NoError(t, os.Link(outside, filepath.Join(dir, "hl.txt")))
	for _, op := range []map[string]any{{"operation": "read", "path": "hl.txt"}, {"operation": "write", "path": "hl.txt", "content": "x"}} {
		res = call(t, r, env, "file_system", op)
		require.False(t, res.OK)
		assert.Contains(t, res.Err.Message, "hard links")
	}
	b, _ := os.ReadFile(outside)
	assert.Equal(t, "SECRET", string(b))

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "top.csv"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "deep", "x.csv"), nil, 0o644))
	res = call(t, r, env, "file_system", map[string]any{"operation": "glob", "path": ".", "pattern": "sub/**.csv"})
	assert.Equal(t, "sub/deep/x.csv", res.Content, "** searches below the folder written before it")
}

// A program that leaves its process group with setsid still ends with the
// call: it is in the program's PID namespace.
func TestExecuteCodeKillsSetsidEscapes(t *testing.T) {
	r := registry(t)
	env, dir := newEnv(t)
	res := call(t, r, env, "execute_code", map[string]any{"language": "bash", "timeout_s": 5,
		"code": "setsid bash -c 'sleep 1.5; echo escaped > escaped.txt' </dev/null >/dev/null 2>&1 & echo started"})
	require.True(t, res.OK, res.ModelText())
	time.Sleep(2500 * time.Millisecond)
	if namespaces.Load() {
		assert.NoFileExists(t, filepath.Join(dir, "escaped.txt"), "the setsid child died with the program")
	} else {
		t.Log("user namespaces are not available here: only the process group is killed")
	}
}
