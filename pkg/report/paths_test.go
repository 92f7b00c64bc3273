package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFileNameStaysInItsFolder(t *testing.T) {
	root := t.TempDir()
	ids := []string{"support-bot-001", "../../escaped-http/pwned", "../escaped-batch/pwned", "..", ".", ".hidden",
		"/etc/passwd", `..\..\win`, "*", ">", "a b", "%00", "%2F..", "bad\xffutf8", "nul\x00", "~tilde",
		strings.Repeat("x", 300), strings.Repeat("é", 200), strings.Repeat("/", 255), ""}
	seen := map[string]string{}
	for _, id := range ids {
		name := FileName(id)
		assert.NotContains(t, name, "/", "%q", id)
		assert.NotContains(t, name, `\`, "%q", id)
		assert.False(t, strings.HasPrefix(name, "."), "%q gives a hidden or relative name %q", id, name)
		assert.LessOrEqual(t, len(name), maxNameBytes, "%q", id)
		assert.NotEmpty(t, name)
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q share the file name %q", id, other, name)
		}
		seen[name] = id

		p, err := Path(root, "live", id)
		require.NoError(t, err, "%q", id)
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		assert.Equal(t, filepath.Join("live", name), rel, "%q", id)
		// and the file system agrees: the folder can be made and is inside root
		require.NoError(t, os.MkdirAll(p, 0o700), "%q", id)
	}
	assert.Equal(t, "support-bot-001", FileName("support-bot-001"), "ordinary ids are unchanged")
	assert.Equal(t, "a%20b", FileName("a b"))
	assert.Equal(t, "%2E.", FileName(".."))
	entries, err := os.ReadDir(filepath.Dir(root))
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), "escaped", "nothing was written beside the root")
	}
}

func TestWriteAuditModes(t *testing.T) {
	root := t.TempDir()
	dir, err := Path(root, "run", "t1")
	require.NoError(t, err)
	require.NoError(t, WriteReport(filepath.Join(dir, MarkdownFile), filepath.Join(dir, JSONFile), []byte("{}"), []byte("# r\n"), nil, DefaultModes))
	for _, f := range []string{JSONFile, MarkdownFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	m, err := ParseModes("0640")
	require.NoError(t, err)
	assert.Equal(t, Modes{File: 0o640, Dir: 0o750}, m)
	for _, bad := range []string{"0400", "rw", "0999", "01777", "6x4"} {
		_, err := ParseModes(bad)
		assert.Error(t, err, bad)
	}
}

// Found by probing: a trace named batch.json or summary.md took the place of
// the batch's own files; a symlink planted in the output folder sent reports
// elsewhere; rewritten reports kept their old, wider modes.
func TestTraceFoldersCannotBeHijacked(t *testing.T) {
	for _, id := range []string{"batch.json", "summary.md", "Batch.JSON"} {
		assert.NotEqual(t, strings.ToLower(id), strings.ToLower(FileName(id)), id)
		assert.NotEqual(t, FileName(id), FileName("%"+id), id)
	}
	root := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "planted")))
	_, err := TraceDir(root, DefaultModes, "planted")
	assert.ErrorContains(t, err, "is a symlink") // was followed before

	dir, err := TraceDir(root, DefaultModes, "t1")
	require.NoError(t, err)
	target := filepath.Join(outside, "target.txt")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o644))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, MarkdownFile)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, JSONFile), []byte("old"), 0o644))
	require.NoError(t, WriteReport(filepath.Join(dir, MarkdownFile), filepath.Join(dir, JSONFile), []byte("{}"), []byte("# new"), nil, DefaultModes))
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b), "not written through the symlink")
	for _, f := range []string{MarkdownFile, JSONFile} {
		st, err := os.Lstat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.True(t, st.Mode().IsRegular(), f)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	require.NoError(t, os.Chmod(dir, 0o755))
	_, err = TraceDir(root, DefaultModes, "t1")
	require.NoError(t, err)
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "an existing folder gets the mode too")
}

// Found in review: the checks ran after MkdirAll had already followed a
// planted symlink (creating and chmodding folders outside), and
// llm_responses/ was not checked at all.
func TestPlantedSymlinksAreRefusedBeforeAnythingIsMade(t *testing.T) {
	root, victim := t.TempDir(), t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(victim, "Documents"), 0o755))
	require.NoError(t, os.Symlink(victim, filepath.Join(root, "run1")))
	for _, id := range []string{"Documents", "newtrace"} {
		_, err := TraceDir(root, DefaultModes, "run1", id)
		assert.ErrorContains(t, err, "is a symlink")
	}
	st, err := os.Stat(filepath.Join(victim, "Documents"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "untouched")
	_, err = os.Stat(filepath.Join(victim, "newtrace"))
	assert.True(t, os.IsNotExist(err), "nothing created outside")

	dir, err := TraceDir(root, DefaultModes, "live", "t1")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, ResponsesDir)))
	err = WriteResponses(dir, map[string]string{"pwned": "hello"}, DefaultModes)
	assert.ErrorContains(t, err, "is a symlink")
	_, err = os.Stat(filepath.Join(victim, "pwned"))
	assert.True(t, os.IsNotExist(err))
}
