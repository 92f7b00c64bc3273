package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// File names inside a trace's report folder.
const (
	MarkdownFile = "report.md"
	JSONFile     = "audit.json"
)

// MarshalAudit renders audit.json.
func MarshalAudit(a *Audit) ([]byte, error) {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode audit.json: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteAudit writes report.md and audit.json to the given paths, each
// atomically, so a crash never leaves half a report behind.
func WriteAudit(mdPath, jsonPath string, a *Audit, markdown []byte) error {
	js, err := MarshalAudit(a)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(jsonPath, js); err != nil {
		return err
	}
	return WriteFileAtomic(mdPath, markdown)
}

// ResponsesDir is where a trace's raw LLM answers go, beside its report.
const ResponsesDir = "llm_responses"

// WriteResponses writes raw LLM answers (file name -> text) into
// dir/llm_responses/. Names come from step ids: anything that could leave
// the folder is refused.
func WriteResponses(dir string, responses map[string]string) error {
	for name, text := range responses {
		if name != filepath.Base(name) || name == "." || name == ".." {
			return fmt.Errorf("write LLM response: unsafe file name %q", name)
		}
		if err := WriteFileAtomic(filepath.Join(dir, ResponsesDir, name), []byte(text)); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes data to a temporary file beside path, then renames it.
func WriteFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(0o644) // CreateTemp makes 0600; reports are for reading
	}
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, errorsJoin(werr, cerr))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
