package skills_test

import (
	"testing"

	"github.com/troy-audit/troy/pkg/agent/skills"
)

// FuzzParse: any SKILL.md is a skill with a name and a description, or an
// error; never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("---\nname: a\ndescription: b\ntools: x, y\n---\nbody"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("\xef\xbb\xbf---\r\nname: a\r\ndescription: b\r\n---\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := skills.Parse(b)
		if err == nil && (s.Name == "" || s.Description == "") {
			t.Fatalf("accepted %q", b)
		}
	})
}
