package report

import (
	"path/filepath"
	"strings"
	"testing"
)

// Whatever two ids are, their file names stay inside the folder, are not
// hidden, fit a file system, and differ when the ids differ.
func FuzzFileName(f *testing.F) {
	for _, s := range []string{"support-bot-001", "../../x", "..", ".", "", "a b", "%00", "~", strings.Repeat("é", 200), "bad\xff"} {
		f.Add(s, s+"x")
	}
	root := filepath.Join("root", "dir")
	f.Fuzz(func(t *testing.T, a, b string) {
		na, nb := FileName(a), FileName(b)
		for id, n := range map[string]string{a: na, b: nb} {
			if n == "" || strings.ContainsAny(n, `/\`+"\x00") || strings.HasPrefix(n, ".") || len(n) > maxNameBytes {
				t.Fatalf("FileName(%q) = %q", id, n)
			}
			p, err := Path(root, "run", id)
			if err != nil || filepath.Dir(filepath.Dir(p)) != root {
				t.Fatalf("Path(%q) = %q, %v: not directly under %s/run", id, p, err, root)
			}
		}
		if a != b && na == nb {
			t.Fatalf("%q and %q share the file name %q", a, b, na)
		}
	})
}
