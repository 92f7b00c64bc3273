package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	gojson "github.com/goccy/go-json"
)

// File names inside a trace's report folder.
const (
	MarkdownFile = "report.md"
	JSONFile     = "audit.json"
)

// MarshalAudit renders audit.json.
func MarshalAudit(a *Audit) ([]byte, error) {
	// no HTML escaping: audit.json is read by people and tools, not
	// embedded in a page ("a > b", not "a \u003e b")
	b, err := gojson.MarshalIndentWithOption(a, "", "  ", gojson.DisableHTMLEscape())
	if err != nil {
		return nil, fmt.Errorf("encode audit.json: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteReport is the one writer of a trace's report files (the reporter's
// folders, a batch's, troy audit's paths): audit.json (indented), report.md
// and the raw LLM answers beside audit.json, each written atomically with
// mode m.File, never through a link.
func WriteReport(mdPath, jsonPath string, auditJSON, markdown []byte, responses map[string]string, m Modes) error {
	if err := WriteResponses(filepath.Dir(jsonPath), responses, m); err != nil {
		return err
	}
	var pretty bytes.Buffer
	pretty.Grow(len(auditJSON) * 3 / 2)
	// goccy's Indent checks the JSON as encoding/json's does, at twice the
	// speed: it was 5% of a batch's CPU.
	if err := gojson.Indent(&pretty, bytes.TrimSpace(auditJSON), "", "  "); err != nil {
		return fmt.Errorf("write %s: audit is not JSON: %w", jsonPath, err)
	}
	pretty.WriteByte('\n')
	if err := WriteFileAtomic(jsonPath, pretty.Bytes(), m); err != nil {
		return err
	}
	return WriteFileAtomic(mdPath, markdown, m)
}

// ResponsesDir is where a trace's raw LLM answers go, beside its report.
const ResponsesDir = "llm_responses"

// WriteResponses writes raw LLM answers (file name -> text) into
// dir/llm_responses/. Names come from step ids, so each goes through
// FileName and cannot leave the folder.
func WriteResponses(dir string, responses map[string]string, m Modes) error {
	if len(responses) == 0 {
		return nil
	}
	sub, err := TraceDir(dir, m, ResponsesDir)
	if err != nil {
		return fmt.Errorf("write LLM response: %w", err)
	}
	for name, text := range responses {
		p, err := Path(sub, name)
		if err != nil {
			return fmt.Errorf("write LLM response: %w", err)
		}
		if err := WriteFileAtomic(p, []byte(text), m); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileAtomic writes data to a temporary file beside path, then renames
// it, creating missing folders with m.Dir and the file with m.File.
func WriteFileAtomic(path string, data []byte, m Modes) error {
	if err := os.MkdirAll(filepath.Dir(path), m.Dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(m.File)
	}
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, errors.Join(werr, cerr))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
