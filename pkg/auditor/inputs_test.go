package auditor

import (
	"os"
	"path/filepath"
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
	for in := range ReadDir(dir, files) {
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
	for in := range ReadDir(dir, []string{"gone.json"}) {
		got = append(got, in)
	}
	require.Len(t, got, 1)
	assert.Equal(t, "gone.json", got[0].Source)
	assert.Error(t, got[0].Err)
}
