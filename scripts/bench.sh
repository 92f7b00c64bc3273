#!/usr/bin/env bash
# troy benchmarks (make bench). Prints:
#   1. evaluator step-evaluations/s (8-rule policy, one core and all cores),
#      beside the Python reference evaluator (../shared/bench/troy_ref.py) on
#      the same generated traces;
#   2. guard check latency in process, over NATS request-reply and over HTTP,
#      and the LLM explainer against a local stub answering in 200 ms;
#   3. troy audit-batch on 1,000 and 10,000 traces x 20 steps (embedded NATS,
#      offline explainer): traces/s and peak RSS, with the output folder on
#      disk and on tmpfs (file creation is slow on some virtual disks).
#   4. streaming audit (tools/cmd/streambench): step -> finding p50/p99,
#      serve CPU per 10k steps and RSS for 500x20, 50x200 and 10x1000
#      traces, findings checked against a batch audit, and one 10,000-step
#      trace streamed whole;
#   5. the transport: our watermill Publisher/Subscriber over raw jetstream
#      against watermill-nats (tools/cmd/transportbench);
#   6. the agent loop per iteration (in process and on the bus) and the
#      tool registry's overhead per call;
#   7. troy mcp-proxy's added latency per tools/call (p50, p99);
#   8. the goals of the pipeline issue, each as a ratio: audit-batch on 10k
#      traces against 2,000 traces/s and against half the Python reference's
#      bare rate (json.load + evaluate, same traces, same run); the evaluator
#      against 20x Python's evaluate(); the in-process guard against p50 5 µs
#      and p99 50 µs; peak RSS at 100k traces against 512 MiB and against 10k.
# BENCH_TRACES=N overrides the large batch size, BENCH_HUGE=N the memory
# flatness run (default 100000; 0 skips it). Everything stays local.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/troy}
N_LARGE=${BENCH_TRACES:-10000}
N_HUGE=${BENCH_HUGE:-100000}
SHARED=${TROY_SHARED:-${SHARED:-../shared}}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/troy-bench.XXXXXX")
SHM=""
if [ -d /dev/shm ] && [ -w /dev/shm ]; then SHM=$(mktemp -d /dev/shm/troy-bench.XXXXXX); fi
trap 'rm -rf "$WORK" ${SHM:+"$SHM"}' EXIT
POLICY=pkg/policy/testdata/bench_policy.yaml

[ -x "$BIN" ] || go build -o "$BIN" ./cmd/troy
echo "== generating traces (deterministic, seed 7)"
go run ./tools/cmd/tracegen "$WORK/t1k" 1000 20 >/dev/null
go run ./tools/cmd/tracegen "$WORK/tlarge" "$N_LARGE" 20 >/dev/null

echo
echo "== evaluator: step-evaluations/s, 8 rules, 20-step traces"
go test -run '^$' -bench 'BenchmarkEvaluate' -benchtime 3s ./pkg/policy/ | tee "$WORK/eval.txt" | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="steps/s") printf "  troy %-28s %10.0f steps/s\n", $1, $(i-1) }'
GO_STEPS=$(awk '/^BenchmarkEvaluate-/ { for (i=1;i<=NF;i++) if ($(i)=="steps/s") print $(i-1) }' "$WORK/eval.txt")
PY_STEPS=""; PY_TRACES=""
if [ -f "$SHARED/bench/troy_ref.py" ] && command -v python3 >/dev/null; then
  python3 "$SHARED/bench/troy_ref.py" "$SHARED/bench/policy_py.json" "$WORK/t1k" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("  python reference (troy_ref.py as shipped)  %10d steps/s  (its timing includes json.load)" % r["steps_per_s"])'
  # The same evaluate() with the traces loaded first (the baseline at its
  # best), and its bare rate with json.load, on the large batch audit-batch runs.
  PYTHONPATH="$SHARED/bench" python3 - "$SHARED/bench/policy_py.json" "$WORK/tlarge" "$WORK/py.txt" <<'PY'
import json, os, sys, time
import troy_ref
pol = json.load(open(sys.argv[1]))
policy = [(r['rule_id'], compile(r['condition'], r['rule_id'], 'eval'), r.get('weight', 10)) for r in pol['rules']]
tl = time.perf_counter()
traces = [json.load(open(os.path.join(sys.argv[2], f))) for f in sorted(os.listdir(sys.argv[2]))]
t0 = time.perf_counter(); steps = 0
for tr in traces:
    troy_ref.evaluate(policy, tr); steps += len(tr['steps'])
t1 = time.perf_counter()
print("  python reference (evaluate() only)        %10d steps/s" % (steps / (t1 - t0)))
print("  python reference bare rate (json.load + evaluate) %6d traces/s" % (len(traces) / (t1 - tl)))
with open(sys.argv[3], "w") as f:
    f.write("%d %d\n" % (steps / (t1 - t0), len(traces) / (t1 - tl)))
PY
  read -r PY_STEPS PY_TRACES < "$WORK/py.txt"
else
  echo "  python reference skipped: $SHARED/bench/troy_ref.py or python3 not found"
fi

echo
echo "== guard check, agent_safety template, 4-step history (latency per check)"
go test -run '^$' -bench 'BenchmarkGuard' -benchtime 20000x ./pkg/guard/ | tee "$WORK/guard.txt" |
  awk '/^BenchmarkGuard/ { p50=""; p99=""; for (i=1;i<=NF;i++) { if ($(i)=="p50-µs") p50=$(i-1); if ($(i)=="p99-µs") p99=$(i-1) }
       printf "  %-28s p50 %8s µs   p99 %8s µs\n", $1, p50, p99 }'

echo
echo "== LLM explainer: 1,000 steps (50 traces x 20) against a local stub answering in 200 ms, concurrency 16"
go test -run '^$' -bench 'BenchmarkLLMExplainer' -benchtime 1x ./pkg/explain/ |
  awk '/^BenchmarkLLM/ { for (i=1;i<=NF;i++) { if ($(i)=="wall-s") w=$(i-1); if ($(i)=="ideal-s") id=$(i-1); if ($(i)=="overhead-ms/call") o=$(i-1); if ($(i)=="max-in-flight") m=$(i-1) }
       printf "  wall %s s (ideal %s s incl. 50 summaries), overhead %s ms per call, at most %s calls in flight\n", w, id, o, m }'

echo
echo "== streaming audit: troy serve, steps over HTTP at 1,000 steps/s for 30 s per shape, findings over NATS"
go run ./tools/cmd/streambench -troy "$BIN" -seconds "${BENCH_STREAM_SECONDS:-30}" | tail -n +2

echo
echo "== transport: 20,000 x 4 KiB messages, publish and one pass-through stage on the router"
go run ./tools/cmd/transportbench -n 20000 | tail -n +2

batch() { # name traces-dir out-parent
  local name=$1 dir=$2 parent=$3 n
  n=$(ls "$dir" | wc -l)
  rm -rf "$parent/out" "$parent/data"
  local t0 t1
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$WORK/rss" "$BIN" audit-batch "$dir" "$POLICY" --out-dir "$parent/out" --data-dir "$parent/data" >/dev/null 2>"$WORK/err" || {
    code=$?; [ $code -eq 0 ] || { echo "  $name: troy exited $code"; cat "$WORK/err"; return 1; }; }
  t1=$(date +%s.%N)
  awk -v n="$n" -v t0="$t0" -v t1="$t1" -v rss="$(tail -1 "$WORK/rss")" -v name="$name" \
    'BEGIN { s=t1-t0; printf "  %-34s %6d traces in %6.2fs = %6.0f traces/s, peak RSS %4.0f MiB\n", name, n, s, n/s, rss/1024 }'
  awk -v n="$n" -v t0="$t0" -v t1="$t1" -v rss="$(tail -1 "$WORK/rss")" 'BEGIN { printf "%.0f %.0f\n", n/(t1-t0), rss/1024 }' > "$WORK/last"
  rm -rf "$parent/out" "$parent/data"
}

echo
echo "== agent loop: one iteration with a model that answers at once (3 calls, a no-op tool), and the registry's cost per call"
go test -run '^$' -bench 'BenchmarkIteration$|BenchmarkRegistryInvoke' -benchtime 2s ./pkg/agent/ | tee "$WORK/agent.txt" | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="µs/iteration" || ($1 ~ /Registry/ && $(i)=="ns/op")) printf "  %-30s %10s %s\n", $1, $(i-1), $(i) }'
echo "  on the bus (KV checkpoint after every phase, every event published, every step streamed to the audit log):"
go test -run '^$' -bench 'BenchmarkIterationOnBus' -benchtime 2s ./pkg/agentrun/ | tee -a "$WORK/agent.txt" | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="µs/iteration") printf "  %-30s %10s %s\n", $1, $(i-1), $(i) }'
AGENT_US=$(awk '/^BenchmarkIteration-/ { for (i=1;i<=NF;i++) if ($(i)=="µs/iteration") print $(i-1) }' "$WORK/agent.txt")

echo
echo "== decision ledger: one writer appending one record per ack, then atomic batches of 500; chain verification; checkpoint signing"
go test -run '^$' -bench 'BenchmarkAppend|BenchmarkVerify|BenchmarkCheckpoint' -benchtime 2s ./pkg/ledger/ | tee "$WORK/ledger.txt" | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="records/s" || $(i)=="ns/entry") printf "  %-28s %12s %s\n", $1, $(i-1), $(i) }'

echo
echo "== MCP proxy: a tools/call straight to the server and through troy mcp-proxy (guard with a cross-step rule), stdio-like pipes"
go test -run '^$' -bench 'BenchmarkProxyCall' -benchtime 5000x ./pkg/mcpproxy/ | tee "$WORK/mcp.txt" | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="p50-µs" || $(i)=="p99-µs") printf "  %-30s %8s %s\n", $1, $(i-1), $(i) }'
awk '/direct/ { for (i=1;i<=NF;i++) if ($(i)=="p50-µs") d50=$(i-1); if ($(i)=="p99-µs") d99=$(i-1) } /proxied/ { for (i=1;i<=NF;i++) { if ($(i)=="p50-µs") p50=$(i-1); if ($(i)=="p99-µs") p99=$(i-1) } } END { printf "  added by the proxy: p50 %d µs, p99 %d µs (target: under 1,000 µs)\n", p50-d50, p99-d99 }' "$WORK/mcp.txt"

echo "== troy audit-batch, embedded NATS, offline explainer"
if [ -n "$SHM" ]; then
  batch "1k, output on tmpfs" "$WORK/t1k" "$SHM"
  batch "${N_LARGE}, output on tmpfs" "$WORK/tlarge" "$SHM"
fi
if [ -d "$SHARED/fixtures/agent-instruct" ]; then
  ai=$(wc -l < "$SHARED/fixtures/agent-instruct/agent_instruct_os.jsonl")
  rm -rf "$WORK/ai" "$WORK/aid"; t0=$(date +%s.%N)
  "$BIN" audit-batch "$SHARED/fixtures/agent-instruct" pkg/templates/agent_safety.yaml --out-dir "$WORK/ai" --data-dir "$WORK/aid" >/dev/null 2>&1 || true
  t1=$(date +%s.%N)
  awk -v n="$ai" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "  %-34s %6d traces in %6.2fs = %6.0f traces/s (agent_safety)\n", "AgentInstruct fixture (chat logs)", n, t1-t0, n/(t1-t0) }'
fi
batch "1k, output on disk" "$WORK/t1k" "$WORK"
batch "${N_LARGE}, output on disk" "$WORK/tlarge" "$WORK"
read -r BATCH_RATE BATCH_RSS < "$WORK/last"
HUGE_RSS=""
if [ "$N_HUGE" -gt 0 ]; then
  echo
  echo "== memory flatness: ${N_HUGE} traces (generated, then audited with output on disk)"
  go run ./tools/cmd/tracegen "$WORK/thuge" "$N_HUGE" 20 >/dev/null
  batch "${N_HUGE}, output on disk" "$WORK/thuge" "$WORK"
  read -r _ HUGE_RSS < "$WORK/last"
  rm -rf "$WORK/thuge"
fi

echo
echo "== against the goals (ratio >= 1 meets it)"
ratio() { awk -v a="$2" -v b="$3" -v label="$1" -v unit="$4" 'BEGIN { if (a == "" || b == "" || b == 0) printf "  %-58s n/a\n", label; else printf "  %-58s %6.2f  (%s)\n", label, a/b, unit }'; }
ratio "audit-batch ${N_LARGE} traces / 2,000 traces/s" "$BATCH_RATE" 2000 "$BATCH_RATE traces/s"
ratio "audit-batch ${N_LARGE} traces / half the Python bare rate" "$BATCH_RATE" "$(awk -v p="$PY_TRACES" 'BEGIN { if (p != "") print p/2 }')" "Python bare ${PY_TRACES:-?} traces/s"
ratio "evaluator / 20x Python evaluate()" "$GO_STEPS" "$(awk -v p="$PY_STEPS" 'BEGIN { if (p != "") print p*20 }')" "$GO_STEPS vs ${PY_STEPS:-?} steps/s = $(awk -v g="$GO_STEPS" -v p="$PY_STEPS" 'BEGIN { if (p > 0) printf "%.1fx", g/p; else print "?" }')"
G50=$(awk '/^BenchmarkGuardInProcess-/ { for (i=1;i<=NF;i++) if ($(i)=="p50-µs") print $(i-1) }' "$WORK/guard.txt")
G99=$(awk '/^BenchmarkGuardInProcess-/ { for (i=1;i<=NF;i++) if ($(i)=="p99-µs") print $(i-1) }' "$WORK/guard.txt")
ratio "guard in process: 5 µs / p50" 5 "$G50" "p50 $G50 µs"
LA=$(awk '/^BenchmarkAppendBatch-/ { for (i=1;i<=NF;i++) if ($(i)=="records/s") print $(i-1) }' "$WORK/ledger.txt")
LV=$(awk '/^BenchmarkVerify-/ { for (i=1;i<=NF;i++) if ($(i)=="records/s") print $(i-1) }' "$WORK/ledger.txt")
ratio "ledger append (batched) / 20,000 records/s" "$LA" 20000 "$LA records/s"
ratio "ledger verify / 200,000 records/s" "$LV" 200000 "$LV records/s"
ratio "guard in process: 50 µs / p99" 50 "$G99" "p99 $G99 µs"
ratio "peak RSS: 512 MiB / RSS at ${N_LARGE} traces" 512 "$BATCH_RSS" "$BATCH_RSS MiB"
ratio "agent loop: 1,000 µs / µs per iteration" 1000 "$AGENT_US" "$AGENT_US µs"
if [ -n "$HUGE_RSS" ]; then
  ratio "peak RSS: 512 MiB / RSS at ${N_HUGE} traces" 512 "$HUGE_RSS" "$HUGE_RSS MiB"
  ratio "flatness: RSS at ${N_LARGE} / RSS at ${N_HUGE} (1 is flat)" "$BATCH_RSS" "$HUGE_RSS" "$BATCH_RSS vs $HUGE_RSS MiB"
fi
