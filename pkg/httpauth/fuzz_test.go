package httpauth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troy-audit/troy/pkg/httpauth"
)

// FuzzLoad: a tokens file is read or refused with an error, never a panic,
// and what is read holds only known scopes.
func FuzzLoad(f *testing.F) {
	f.Add("ops admin sha256:" + strings.Repeat("ab", 32) + "\n# c\n\nci ingest,guard sha256:" + strings.Repeat("0", 64))
	f.Add("a b c d")
	f.Fuzz(func(t *testing.T, content string) {
		file := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Skip()
		}
		ts, err := httpauth.Load(file)
		if err != nil {
			return
		}
		for _, tok := range ts.Names() {
			for _, s := range tok.Scopes {
				if !slices.Contains(httpauth.Scopes, s) {
					t.Fatalf("token %s read with scope %q", tok.Name, s)
				}
			}
		}
	})
}
