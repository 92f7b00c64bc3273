package tools

import (
	"path"
	"strings"
	"testing"
)

// FuzzConfine: a path Confine accepts is relative and cannot climb out of
// the workspace, however it is spelled.
func FuzzConfine(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/etc/passwd", `..\..\x`, "a/../../b", ".", "a/./b/..", "\x00", "C:/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, e := Confine(raw)
		if e != nil {
			return
		}
		if strings.HasPrefix(p, "/") || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\x00") || p != path.Clean(p) {
			t.Fatalf("Confine(%q) = %q", raw, p)
		}
	})
}
