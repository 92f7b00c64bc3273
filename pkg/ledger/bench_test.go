package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

// BenchmarkAppend is one writer appending to one ledger on the embedded
// server (each append waits for its ack: the chain needs the sequence).
func BenchmarkAppend(b *testing.B) {
	srv, _ := bustest.Provisioned(b)
	w, err := ledger.Open(context.Background(), srv.JS, "bench", "bench")
	if err != nil {
		b.Fatal(err)
	}
	data := map[string]any{"tool": "file_system", "arguments_sha256": "ab12", "tokens": 1234, "status": "ok"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := w.Append(context.Background(), "iteration", data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendBatch is one writer appending batches of ledger.MaxBatch records,
// each batch one atomic publish and one ack.
func BenchmarkAppendBatch(b *testing.B) {
	srv, _ := bustest.Provisioned(b)
	w, err := ledger.Open(context.Background(), srv.JS, "bench", "bench")
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]ledger.Entry, ledger.MaxBatch)
	for i := range batch {
		batch[i] = ledger.Entry{Kind: "guard", Data: map[string]any{"tool": "file_system", "arguments_sha256": "ab12", "decision": "allow"}}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := w.AppendBatch(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkVerify checks a 10,000-record chain.
func BenchmarkVerify(b *testing.B) {
	prev := ledger.Genesis
	var entries [][]byte
	for i := 1; i <= 10000; i++ {
		e, err := ledger.Canonical(ledger.Record{Ledger: "bench", Seq: uint64(i), Kind: "iteration", Writer: "w", TS: "2026-11-30T20:00:00Z",
			Data: map[string]any{"i": i, "tool": fmt.Sprint("t", i%7)}, PrevHash: prev})
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, e)
		prev = ledger.EntryHash(e)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := ledger.Verify("bench", entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(entries))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCheckpoint signs the Merkle root over 10,000 entries.
func BenchmarkCheckpoint(b *testing.B) {
	sk, _, _ := ledger.GenerateKey("bench")
	s, _ := ledger.LoadSigner(sk)
	var entries [][]byte
	for i := range 10000 {
		entries = append(entries, []byte(fmt.Sprintf(`{"seq":%d}`, i)))
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := ledger.Sign(s, entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(entries)), "ns/entry")
}
