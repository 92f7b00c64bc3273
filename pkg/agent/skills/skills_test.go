package skills_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent/skills"
)

func TestShippedSkillsLoad(t *testing.T) {
	lib, err := skills.Load("../../../skills")
	require.NoError(t, err)
	assert.Equal(t, []string{"audit-trace", "profile-data", "write-report"}, lib.Names())
	for _, n := range lib.Names() {
		s, _ := lib.Get(n)
		assert.NotEmpty(t, s.Description, n)
		assert.NotEmpty(t, s.Body, n)
		assert.NotEmpty(t, s.Tools, n)
	}
	lines := strings.Split(lib.Index(), "\n")
	require.Len(t, lines, 3)
	assert.True(t, strings.HasPrefix(lines[0], "- `audit-trace` (v1.0.0): Audit an agent trace"), lines[0])
	assert.Contains(t, lines[1], " -- use when: ")
}

func TestSkillProblems(t *testing.T) {
	for name, tc := range map[string]struct{ text, err string }{
		"no front matter": {"# hi", "no front matter"},
		"unclosed":        {"---\nname: a\n", "not closed"},
		"no description":  {"---\nname: a\n---\nbody", "needs name: and description:"},
		"unknown key":     {"---\nname: a\ndescription: b\ncolour: red\n---\n", "allowed keys"},
	} {
		_, err := skills.Parse([]byte(tc.text))
		assert.ErrorContains(t, err, tc.err, name)
	}
	s, err := skills.Parse([]byte("---\nname: a\ndescription: b\ntools: x, y\n---\n\nDo it.\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, s.Tools)
	assert.Equal(t, "0.0.0", s.Version)
	assert.Equal(t, "Do it.", s.Body)

	dir := t.TempDir()
	for _, sub := range []string{"one", "two"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, sub), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, sub, "SKILL.md"), []byte("---\nname: same\ndescription: d\n---\n"), 0o644))
	}
	_, err = skills.Load(dir)
	assert.ErrorContains(t, err, `two skills are named "same"`)
	_, err = skills.Load(filepath.Join(dir, "missing"))
	assert.ErrorContains(t, err, "not a directory")
}
