package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// seedTraces adds the shipped example traces and the shapes that broke
// parsers before to a fuzz corpus.
func seedTraces(f *testing.F) {
	paths, _ := filepath.Glob("../../examples/traces/*.json")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", " ", "\xef\xbb\xbf", "null", "[]", "{}", `{"steps":[]}`,
		`{"trace_id":"t","agent_name":"a","steps":[{"step_id":"x","type":"llm_call","parent_step_id":"x"}]}`,
		`{"id":"../../escaped/pwned","messages":[{"role":"user","content":"hi"}]}`,
		`[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"ls","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]`,
		`{"traj":[{"role":"user","content":"x"}],"task_id":3,"trial":0}`,
	} {
		f.Add([]byte(s))
	}
}

// checkAccepted holds for every trace a parser accepts: its id is a valid
// id, its steps have unique ids and known types, and its canonical JSON
// parses back to the same canonical JSON.
func checkAccepted(t *testing.T, tr *Trace) {
	t.Helper()
	if err := ValidateID(tr.TraceID); err != nil {
		t.Fatalf("accepted a trace whose id is invalid: %v", err)
	}
	if len(tr.Steps) == 0 {
		t.Fatal("accepted a trace without steps")
	}
	seen := map[string]bool{}
	for i, s := range tr.Steps {
		if s.StepID == "" || seen[s.StepID] || !isStepType(s.Type) {
			t.Fatalf("steps[%d] %+v: empty, duplicate or untyped", i, s)
		}
		seen[s.StepID] = true
	}
	first, err := json.Marshal(tr)
	if err != nil {
		t.Fatalf("marshal an accepted trace: %v", err)
	}
	again, err := Parse(first, Limits{})
	if err != nil {
		t.Fatalf("the canonical form of an accepted trace does not parse: %v\n%s", err, first)
	}
	second, _ := json.Marshal(again)
	if !bytes.Equal(first, second) {
		t.Fatalf("canonical form changes when parsed again:\n%s\n%s", first, second)
	}
}

func rejected(t *testing.T, err error) {
	t.Helper()
	var inv *InvalidError
	if !errors.As(err, &inv) || len(inv.Problems) == 0 {
		t.Fatalf("a rejection must be an *InvalidError with problems, got %T %v", err, err)
	}
}

func FuzzParseAny(f *testing.F) {
	seedTraces(f)
	lim := Limits{MaxBytes: 1 << 20, MaxSteps: 1000}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []string{FormatAuto, FormatTroy, FormatMessages} {
			tr, err := ParseAny(data, lim, format, "fuzz.jsonl-1")
			if err != nil {
				rejected(t, err)
				continue
			}
			checkAccepted(t, tr)
		}
	})
}

func FuzzParseSteps(f *testing.F) {
	seedTraces(f)
	f.Add([]byte(`{"step_id": 1, "type": "tool_call", "timestamp": "2026-01-02"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		steps, err := ParseSteps(data, Limits{MaxBytes: 1 << 20, MaxSteps: 1000})
		if err != nil {
			rejected(t, err)
			return
		}
		if len(steps) == 0 {
			t.Fatal("accepted no steps")
		}
		for _, s := range steps {
			if s.StepID == "" || !isStepType(s.Type) {
				t.Fatalf("accepted step %+v", s)
			}
		}
	})
}
