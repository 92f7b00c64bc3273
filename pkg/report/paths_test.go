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
	require.NoError(t, WriteAudit(dir, &Audit{}, []byte("# r\n"), DefaultModes))
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
