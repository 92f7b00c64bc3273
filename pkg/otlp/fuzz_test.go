package otlp

import (
	"errors"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/troy-audit/troy/pkg/trace"
)

func exportSeeds(f *testing.F) {
	req := ptraceotlp.NewExportRequestFromTraces(agentRun(true))
	if b, err := req.MarshalProto(); err == nil {
		f.Add(b, true)
	}
	if b, err := req.MarshalJSON(); err == nil {
		f.Add(b, false)
	}
	f.Add([]byte(`{"resourceSpans": []}`), false)
	f.Add([]byte(`{"resourceSpans": 7}`), false)
	f.Add([]byte{}, true)
}

// Any export, protobuf or JSON, is decoded and converted without a panic;
// every trace it gives has a valid id and typed steps with unique ids.
func FuzzOTLP(f *testing.F) {
	exportSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, proto bool) {
		ct := "application/json"
		if proto {
			ct = "application/x-protobuf"
		}
		td, err := Decode(data, ct)
		if err == nil {
			runs, _ := Convert(td)
			for _, c := range runs {
				check(t, c.Trace)
			}
		}
		if proto {
			return
		}
		tr, err := Parse(data, trace.Limits{MaxBytes: 1 << 20, MaxSteps: 1000})
		if err != nil {
			var inv *trace.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("rejections are *trace.InvalidError, got %T %v", err, err)
			}
			return
		}
		check(t, tr)
	})
}

func check(t *testing.T, tr *trace.Trace) {
	t.Helper()
	if err := trace.ValidateID(tr.TraceID); err != nil {
		t.Fatalf("converted trace with an invalid id: %v", err)
	}
	seen := map[string]bool{}
	for _, s := range tr.Steps {
		if s.StepID == "" || seen[s.StepID] || s.Type == "" {
			t.Fatalf("bad step %+v", s)
		}
		seen[s.StepID] = true
	}
}
