package report

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzReadAudit: whatever an audit.json holds, reading it (diff, trends,
// replay, the batch page) ends in an error or in the readers' outputs,
// never a crash.
func FuzzReadAudit(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"schema_version": "1", "trace": {"trace_id": "t", "agent_name": "a", "steps": [null]}}`))
	f.Add([]byte(`{"schema_version": "1", "trace": {"trace_id": "t", "agent_name": "a", "steps": [{"step_id": "s1", "type": "tool_call", "name": "x"}]},
	  "violations": [{"rule_id": "r", "step_id": "s1", "severity": "high"}, {"rule_id": "r", "step_id": "nope"}], "explanations": {"s1": {"why": "w"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAudit(data, "audit.json")
		if err != nil {
			return
		}
		FindingsOf("audit.json", a)
		Replay(io.Discard, a, nil)
		_, _ = HTML(a)
	})
}

// A null step is refused by name, not a crash further on; a batch entry
// pointing outside its folder is not read.
func TestAuditReadersRefuseWhatTroyDidNotWrite(t *testing.T) {
	_, err := DecodeAudit([]byte(`{"trace": {"trace_id": "t", "steps": [null]}}`), "x/audit.json")
	assert.EqualError(t, err, "x/audit.json: not an audit.json troy wrote: steps[0] is null")

	root := t.TempDir()
	outside := filepath.Join(root, "outside", "t")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, JSONFile), []byte(`{"trace": {"trace_id": "secret", "steps": []}}`), 0o644))
	batch := filepath.Join(root, "batch")
	require.NoError(t, os.MkdirAll(batch, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(batch, "batch.json"),
		[]byte(`{"entries": [{"status": "audited", "report": "../outside/t/report.md"}]}`), 0o644))
	_, err = LoadFindings(batch)
	assert.ErrorContains(t, err, "holds no audit", "the entry outside the folder was not read")
}

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
