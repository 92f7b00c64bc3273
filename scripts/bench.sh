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
# BENCH_TRACES=N overrides the large batch size. Everything stays local.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/troy}
N_LARGE=${BENCH_TRACES:-10000}
SHARED=${SHARED:-../shared}
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
go test -run '^$' -bench 'BenchmarkEvaluate' -benchtime 3s ./pkg/policy/ | awk '/^Benchmark/ { for (i=1;i<=NF;i++) if ($(i)=="steps/s") printf "  troy %-28s %10.0f steps/s\n", $1, $(i-1) }'
if [ -f "$SHARED/bench/troy_ref.py" ] && command -v python3 >/dev/null; then
  python3 "$SHARED/bench/troy_ref.py" "$SHARED/bench/policy_py.json" "$WORK/t1k" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("  python reference (troy_ref.py as shipped)  %10d steps/s  (its timing includes json.load)" % r["steps_per_s"])'
  # The same evaluate() with the traces loaded first: the baseline at its best.
  PYTHONPATH="$SHARED/bench" python3 - "$SHARED/bench/policy_py.json" "$WORK/t1k" <<'PY'
import json, os, sys, time
import troy_ref
pol = json.load(open(sys.argv[1]))
policy = [(r['rule_id'], compile(r['condition'], r['rule_id'], 'eval'), r.get('weight', 10)) for r in pol['rules']]
traces = [json.load(open(os.path.join(sys.argv[2], f))) for f in sorted(os.listdir(sys.argv[2]))]
t0 = time.perf_counter(); steps = 0
for tr in traces:
    troy_ref.evaluate(policy, tr); steps += len(tr['steps'])
print("  python reference (evaluate() only)        %10d steps/s" % (steps / (time.perf_counter() - t0)))
PY
else
  echo "  python reference skipped: $SHARED/bench/troy_ref.py or python3 not found"
fi

echo
echo "== guard check, agent_safety template, 4-step history (latency per check)"
go test -run '^$' -bench 'BenchmarkGuard' -benchtime 20000x ./pkg/guard/ |
  awk '/^BenchmarkGuard/ { p50=""; p99=""; for (i=1;i<=NF;i++) { if ($(i)=="p50-µs") p50=$(i-1); if ($(i)=="p99-µs") p99=$(i-1) }
       printf "  %-28s p50 %8s µs   p99 %8s µs\n", $1, p50, p99 }'

echo
echo "== LLM explainer: 1,000 steps (50 traces x 20) against a local stub answering in 200 ms, concurrency 16"
go test -run '^$' -bench 'BenchmarkLLMExplainer' -benchtime 1x ./pkg/explain/ |
  awk '/^BenchmarkLLM/ { for (i=1;i<=NF;i++) { if ($(i)=="wall-s") w=$(i-1); if ($(i)=="ideal-s") id=$(i-1); if ($(i)=="overhead-ms/call") o=$(i-1); if ($(i)=="max-in-flight") m=$(i-1) }
       printf "  wall %s s (ideal %s s incl. 50 summaries), overhead %s ms per call, at most %s calls in flight\n", w, id, o, m }'

echo
echo "== streaming: 1,000 steps/s offered to the streamer, publish -> finding on troy.violations.>"
go test -run '^$' -bench 'BenchmarkStreamingLatency' -benchtime 3000x ./services/ |
  awk '/^BenchmarkStreaming/ { for (i=1;i<=NF;i++) { if ($(i)=="p50-ms") p50=$(i-1); if ($(i)=="p99-ms") p99=$(i-1) }
       printf "  p50 %s ms   p99 %s ms\n", p50, p99 }'

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
  rm -rf "$parent/out" "$parent/data"
}

echo
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
