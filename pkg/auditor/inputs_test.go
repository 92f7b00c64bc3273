package auditor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListAndReadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	write("b.json", `{"trace_id":"b"}`)
	write("a.jsonl", "{\"n\":1}\n\n   \n{\"n\":2}\n")
	write("notes.md", "ignored")
	write(".hidden.json", "ignored")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.json"), 0o755))

	files, n, err := ListDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.jsonl", "b.json"}, files)
	assert.Equal(t, 3, n)

	var got []string
	for in := range ReadDir(dir, files, 0) {
		require.NoError(t, in.Err)
		got = append(got, in.Source+" "+string(in.Data))
	}
	assert.Equal(t, []string{`a.jsonl:1 {"n":1}`, `a.jsonl:4 {"n":2}`, `b.json {"trace_id":"b"}`}, got)

	_, _, err = ListDir(t.TempDir())
	assert.ErrorContains(t, err, "no .json or .jsonl traces in")
}

func TestReadDirReportsUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	var got []Input
	for in := range ReadDir(dir, []string{"gone.json"}, 0) {
		got = append(got, in)
	}
	require.Len(t, got, 1)
	assert.Equal(t, "gone.json", got[0].Source)
	assert.Error(t, got[0].Err)
}

// One input over the limit is one rejected input (it aborted the batch
// before: a .jsonl line over 64 MiB stopped the listing, a file over the
// message size stopped the run); the inputs around it are read as usual.
func TestOversizedInputsAreRejectedOneByOne(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", 1000)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lines.jsonl"),
		[]byte("{\"n\":1}\r\n\""+big+"\"\n{\"n\":3}"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.json"), []byte(`"`+big+`"`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"n":4}`), 0o644))
	files, n, err := ListDir(dir)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	var got []string
	for in := range ReadDir(dir, files, 100) {
		if in.Err != nil {
			assert.ErrorIs(t, in.Err, ErrTooLarge)
			got = append(got, in.Source+" rejected: "+in.Err.Error())
			continue
		}
		got = append(got, in.Source+" "+string(in.Data))
	}
	assert.Equal(t, []string{
		"big.json rejected: input too large: 1002 bytes, over the 100-byte limit: split it or raise the limit (--max-trace-bytes)",
		`lines.jsonl:1 {"n":1}`,
		"lines.jsonl:2 rejected: input too large: 1003 bytes, over the 100-byte limit: split it or raise the limit (--max-trace-bytes)",
		`lines.jsonl:3 {"n":3}`,
		`ok.json {"n":4}`,
	}, got)

	// a line longer than bufio.Scanner's old 64 MiB ceiling is counted, not fatal
	long := filepath.Join(dir, "long.jsonl")
	f, err := os.Create(long)
	require.NoError(t, err)
	chunk := []byte(strings.Repeat("y", 1<<20))
	for range 65 {
		_, err = f.Write(chunk)
		require.NoError(t, err)
	}
	_, err = f.WriteString("\n{\"n\":2}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	c, err := countLines(long)
	require.NoError(t, err)
	assert.Equal(t, 2, c)
}

// Files that are not files (found by probing): a dangling link aborted the
// batch, a FIFO hung it, /dev/zero ran it out of memory. Each is one
// rejected input now.
func TestSpecialFilesAreRejectedOneByOne(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"n":1}`), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "broken.jsonl")))
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.json")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe.json"), 0o644))
	files, n, err := ListDir(dir)
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	got := map[string]string{}
	for in := range ReadDir(dir, files, 1<<20) {
		if in.Err != nil {
			got[in.Source] = in.Err.Error()
		} else {
			got[in.Source] = string(in.Data)
		}
	}
	assert.Equal(t, `{"n":1}`, got["ok.json"])
	assert.Contains(t, got["broken.jsonl"], "no such file")
	assert.Contains(t, got["pipe.json"], "is not a regular file")
	assert.Contains(t, got["zero.json"], "is not a regular file")
}
