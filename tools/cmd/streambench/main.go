// Command streambench measures streaming audit as a user runs it: it starts
// `troy serve` (embedded NATS, offline explainer, the bench policy), streams
// generated traces over HTTP (POST /v1/traces/{id}/steps, the metadata with
// /end) at a fixed rate, and reads troy.violations.> over NATS. For each
// shape (traces x steps each) it prints the p50/p99 time from a step
// accepted (HTTP 202) to its finding, serve's CPU per 10k steps and its
// RSS, and checks the findings against a batch audit of the same traces:
// duplicates, missing and extra must all be zero. Then one 10,000-step
// trace is streamed whole.
//
//	go run ./tools/cmd/streambench [-troy bin/troy] [-rate 1000] [-seconds 30]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/pkg/tracegen"
)

func main() {
	troy := flag.String("troy", "bin/troy", "the troy binary")
	policyFile := flag.String("policy", "pkg/policy/testdata/bench_policy.yaml", "policy")
	rate := flag.Int("rate", 1000, "steps per second offered")
	seconds := flag.Int("seconds", 30, "seconds per shape")
	shapes := flag.String("shapes", "500x20,50x200,10x1000", "traces x steps each, streamed side by side")
	whole := flag.Int("whole", 10000, "steps of the one trace streamed whole at the end (0 skips)")
	flag.Parse()
	if err := run(*troy, *policyFile, *rate, *seconds, *shapes, *whole); err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		os.Exit(1)
	}
}

var (
	bannerNATS = regexp.MustCompile(`nats: (nats://\S+)`)
	bannerHTTP = regexp.MustCompile(`http: (http://\S+)`)
)

type bench struct {
	http    string
	nc      *nats.Conn
	engine  *policy.Engine
	now     map[string]bool // rules decided on arrival
	client  *http.Client
	mu      sync.Mutex
	sent    map[string]time.Time // trace/step -> accepted
	lat     []time.Duration
	finding map[string]int // trace/rule@step -> copies
}

func run(troy, policyFile string, rate, seconds int, shapes string, whole int) error {
	dir, err := os.MkdirTemp("", "streambench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	serve := exec.Command(troy, "serve", "--policy", policyFile, "--nats-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", dir+"/data", "--log-level", "warn")
	serve.Env = append(os.Environ(), "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	out, err := serve.StdoutPipe()
	if err != nil {
		return err
	}
	serve.Stderr = os.Stderr
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() { // a clean stop, so TROY_CPUPROFILE (passed on to serve) is written
		_ = serve.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = serve.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
		}
	}()
	natsURL, httpURL := "", ""
	sc := bufio.NewScanner(out)
	for (natsURL == "" || httpURL == "") && sc.Scan() {
		if m := bannerNATS.FindStringSubmatch(sc.Text()); m != nil {
			natsURL = m[1]
		}
		if m := bannerHTTP.FindStringSubmatch(sc.Text()); m != nil {
			httpURL = m[1]
		}
	}
	if natsURL == "" || httpURL == "" {
		return errors.New("troy serve printed no addresses")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	b, err := os.ReadFile(policyFile)
	if err != nil {
		return err
	}
	p, err := policy.Parse(b)
	if err != nil {
		return err
	}
	e, err := policy.Compile(p)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	bn := &bench{http: httpURL, nc: nc, engine: e, now: map[string]bool{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second},
		sent:   map[string]time.Time{}, finding: map[string]int{}}
	info := e.ReadsTraceInfo()
	for i, when := range e.DecideWhen() {
		if when == policy.DecideNow && !info[i] {
			bn.now[p.Rules[i].RuleID] = true
		}
	}
	sub, err := nc.Subscribe("troy.violations.>", bn.onFinding)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)

	fmt.Printf("troy serve (embedded NATS, offline explainer), %s, %d steps/s offered over HTTP\n", policyFile, rate)
	round := 0
	for _, shape := range strings.Split(shapes, ",") {
		var n, steps int
		if _, err := fmt.Sscanf(shape, "%dx%d", &n, &steps); err != nil {
			return fmt.Errorf("shape %q: want TRACESxSTEPS", shape)
		}
		rounds := max(1, seconds*rate/(n*steps))
		var traces []*trace.Trace
		for range rounds {
			round++
			for i := range n {
				tr, err := genTrace(fmt.Sprintf("r%d-", round), uint64(round), i, steps)
				if err != nil {
					return err
				}
				traces = append(traces, tr)
			}
		}
		cpu0, _ := bn.metric("process_cpu_seconds_total")
		start := time.Now()
		if err := bn.stream(traces, n, rate); err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		cpu1, _ := bn.metric("process_cpu_seconds_total")
		rss, _ := bn.metric("process_resident_memory_bytes")
		p50, p99, dup, missing, extra := bn.results(traces)
		fmt.Printf("  %5d x %-5d %3d rounds, %6d steps in %5.1fs: step -> finding p50 %6.2f ms  p99 %6.2f ms; serve CPU %5.2f s per 10k steps, RSS %4.0f MiB; findings: %d duplicate, %d missing, %d extra\n",
			n, steps, rounds, n*steps*rounds, secs, p50, p99, (cpu1-cpu0)/float64(n*steps*rounds)*10000, rss/(1<<20), dup, missing, extra)
	}
	if whole > 0 {
		tr, err := genTrace("whole-", 99, 0, whole)
		if err != nil {
			return err
		}
		start := time.Now()
		for i := 0; i < len(tr.Steps); i += 100 {
			body, _ := json.Marshal(tr.Steps[i:min(i+100, len(tr.Steps))])
			if err := bn.post("/v1/traces/"+tr.TraceID+"/steps", body); err != nil {
				return err
			}
		}
		if err := bn.end([]*trace.Trace{tr}); err != nil {
			return err
		}
		rss, _ := bn.metric("process_resident_memory_bytes")
		_, _, dup, missing, extra := bn.results([]*trace.Trace{tr})
		fmt.Printf("  one trace of %d steps streamed whole (100 a request), reported in %.1fs; serve RSS %.0f MiB; findings: %d duplicate, %d missing, %d extra\n",
			whole, time.Since(start).Seconds(), rss/(1<<20), dup, missing, extra)
	}
	return nil
}

func genTrace(prefix string, seed uint64, i, steps int) (*trace.Trace, error) {
	raw := tracegen.Trace(seed, i, steps)
	raw["trace_id"] = prefix + raw["trace_id"].(string)
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return trace.Parse(b, trace.Limits{MaxBytes: 64 << 20, MaxSteps: 100000})
}

// stream sends the traces' steps one per request, n traces side by side,
// at the rate, then ends them with their metadata.
func (bn *bench) stream(traces []*trace.Trace, n, rate int) error {
	type job struct {
		tr *trace.Trace
		i  int
	}
	jobs := make(chan job, 64)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				body, _ := json.Marshal(j.tr.Steps[j.i])
				key := j.tr.TraceID + "/" + j.tr.Steps[j.i].StepID
				if err := bn.post("/v1/traces/"+j.tr.TraceID+"/steps", body); err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				bn.mu.Lock()
				bn.sent[key] = time.Now()
				bn.mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for g := 0; g < len(traces); g += n {
		group := traces[g:min(g+n, len(traces))]
		for s := range len(group[0].Steps) {
			for _, tr := range group {
				<-tick.C
				jobs <- job{tr, s}
			}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return bn.end(traces)
}

// end ends every trace, its agent and metadata with it, and waits for the
// reports of all.
func (bn *bench) end(traces []*trace.Trace) error {
	reports, err := bn.nc.SubscribeSync("troy.report.live")
	if err != nil {
		return err
	}
	defer reports.Unsubscribe()
	_ = reports.SetPendingLimits(-1, -1)
	want := map[string]bool{}
	for _, tr := range traces {
		body, _ := json.Marshal(stream.Start{AgentName: tr.AgentName, Metadata: tr.Metadata})
		if err := bn.post("/v1/traces/"+tr.TraceID+"/end", body); err != nil {
			return err
		}
		want[tr.TraceID] = true
	}
	for len(want) > 0 {
		m, err := reports.NextMsg(60 * time.Second)
		if err != nil {
			return fmt.Errorf("waiting for reports (%d left): %w", len(want), err)
		}
		var rep struct {
			Audit struct {
				Trace struct {
					TraceID string `json:"trace_id"`
				} `json:"trace"`
			} `json:"audit"`
		}
		if json.Unmarshal(m.Data, &rep) == nil {
			delete(want, rep.Audit.Trace.TraceID)
		}
	}
	time.Sleep(300 * time.Millisecond) // findings are published before their report; let the last land
	return nil
}

func (bn *bench) post(path string, body []byte) error {
	resp, err := bn.client.Post(bn.http+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, b)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

func (bn *bench) onFinding(m *nats.Msg) {
	at := time.Now()
	var f ocsf.Finding
	if json.Unmarshal(m.Data, &f) != nil {
		return
	}
	traceID, _ := f.Unmapped["trace_id"].(string)
	stepID, _ := f.Unmapped["step_id"].(string)
	rule := f.FindingInfo.Analytic.UID
	bn.mu.Lock()
	defer bn.mu.Unlock()
	bn.finding[traceID+"/"+rule+"@"+stepID]++
	if t0, ok := bn.sent[traceID+"/"+stepID]; ok && bn.now[rule] {
		bn.lat = append(bn.lat, at.Sub(t0))
	}
}

// results compares the findings of these traces with their batch audit,
// and takes the latencies measured since the last call.
func (bn *bench) results(traces []*trace.Trace) (p50, p99 float64, dup, missing, extra int) {
	bn.mu.Lock()
	defer bn.mu.Unlock()
	want := map[string]bool{}
	ids := map[string]bool{}
	for _, tr := range traces {
		ids[tr.TraceID] = true
		for _, v := range bn.engine.Evaluate(tr).Violations {
			want[tr.TraceID+"/"+v.RuleID+"@"+v.StepID] = true
		}
	}
	for k, n := range bn.finding {
		if !ids[k[:strings.IndexByte(k, '/')]] {
			continue
		}
		if n > 1 {
			dup++
		}
		if !want[k] {
			extra++
		}
	}
	for k := range want {
		if bn.finding[k] == 0 {
			missing++
		}
	}
	lat := bn.lat
	bn.lat = nil
	if len(lat) == 0 {
		return 0, 0, dup, missing, extra
	}
	slices.Sort(lat)
	q := func(x float64) float64 { return float64(lat[int(float64(len(lat)-1)*x)].Microseconds()) / 1000 }
	return q(0.5), q(0.99), dup, missing, extra
}

func (bn *bench) metric(name string) (float64, error) {
	resp, err := bn.client.Get(bn.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}
