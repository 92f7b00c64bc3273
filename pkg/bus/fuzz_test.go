package bus_test

import (
	"strconv"
	"testing"

	"github.com/troy-audit/troy/pkg/bus"
)

// Streamed-trace subjects come from anyone who can publish: parsing one
// never panics, and what it accepts is exactly what StreamSubject builds.
func FuzzParseStreamSubject(f *testing.F) {
	for _, s := range []string{"troy.ingest.step.3.run-42", "troy.ingest.end.0.a.b", "troy.ingest.start.7.café",
		"troy.ingest.step.03.x", "troy.ingest.step.-1.x", "troy.ingest.stop.1.x", "troy.ingest.step.1", "troy.ingest.r1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		kind, p, id, ok := bus.ParseStreamSubject(subject)
		if !ok {
			return
		}
		if kind != bus.StreamStart && kind != bus.StreamStep && kind != bus.StreamEnd {
			t.Fatalf("%q: kind %q", subject, kind)
		}
		if p < 0 {
			t.Fatalf("%q: partition %d", subject, p)
		}
		if got := "troy.ingest." + kind + "." + strconv.Itoa(p) + "." + id; got != subject {
			t.Fatalf("%q parsed to (%s, %d, %q), which builds %q", subject, kind, p, id, got)
		}
		if bus.ValidTraceToken(id) && bus.Partition(id, p+1) >= p+1 {
			t.Fatalf("partition of %q out of range", id)
		}
	})
}
