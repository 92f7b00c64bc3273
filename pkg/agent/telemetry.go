package agent

import (
	"sort"
	"sync"
	"time"
)

// Telemetry sums runs' events into the numbers an operator watches: model
// calls (by phase and status), tool calls (by tool and error), time spent
// and time waiting for people, spend, and what the safety machinery did.
// It is a Sink; safety counts add up across runs.
type Telemetry struct {
	mu sync.Mutex

	LLM      CallStats             `json:"llm"`
	LLMPhase map[string]int        `json:"llm_by_phase"`
	Tools    map[string]*CallStats `json:"tools"`

	TotalS, IdleS float64        `json:"-"`
	CostUSD       float64        `json:"cost_usd"`
	Blocked       int            `json:"blocked_calls"`
	BlockedByTool map[string]int `json:"blocked_by_tool"`
	CircuitTrips  map[string]int `json:"circuit_trips"`
	Exhaustions   map[string]int `json:"budget_exhaustions"`
	Cancellations int            `json:"cancellations"`
	Runs          map[string]int `json:"runs_by_status"`
	starts        map[string]time.Time
	asked         map[string]time.Time // run id + tool -> approval requested at
}

// CallStats counts calls of one kind.
type CallStats struct {
	Count       int            `json:"count"`
	Errors      int            `json:"errors"`
	LatencyMS   float64        `json:"latency_ms_total"`
	MaxMS       float64        `json:"latency_ms_max"`
	Tokens      int            `json:"tokens,omitempty"`
	StatusCodes map[string]int `json:"status_codes,omitempty"`
	ErrorCodes  map[string]int `json:"error_codes,omitempty"`
}

func (c *CallStats) add(ms float64, failed bool) {
	c.Count++
	c.LatencyMS += ms
	c.MaxMS = max(c.MaxMS, ms)
	if failed {
		c.Errors++
	}
}

// NumberOf reads a number from decoded event data (float64 after JSON,
// int or int64 in process); anything else is 0.
func NumberOf(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	}
	return 0
}

func bump(m *map[string]int, k string) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k]++
}

// Emit implements Sink.
func (t *Telemetry) Emit(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := ev.Data // scalars only: NumberOf and str read both shapes
	switch ev.Type {
	case EventRunStart:
		if t.starts == nil {
			t.starts = map[string]time.Time{}
		}
		t.starts[ev.RunID] = ev.TS
	case EventRunEnd:
		if s, ok := t.starts[ev.RunID]; ok {
			t.TotalS += ev.TS.Sub(s).Seconds()
			delete(t.starts, ev.RunID)
		}
		bump(&t.Runs, str(d["status"]))
	case EventLLMResponse:
		failed := d["status"] != "ok"
		t.LLM.add(NumberOf(d["latency_ms"]), failed)
		t.LLM.Tokens += int(NumberOf(d["input_tokens"]) + NumberOf(d["output_tokens"]))
		key := "ok"
		if failed {
			key = "error"
			if c := NumberOf(d["status_code"]); c > 0 {
				key = "http_" + str(int(c))
			} else if et := str(d["error_type"]); et != "" {
				key = "error:" + et
			}
		}
		bump(&t.LLM.StatusCodes, key)
		phase := ev.Phase
		if phase == "" {
			phase = "unknown"
		}
		bump(&t.LLMPhase, phase)
	case EventToolResult:
		if t.Tools == nil {
			t.Tools = map[string]*CallStats{}
		}
		name := str(d["tool"])
		s := t.Tools[name]
		if s == nil {
			s = &CallStats{}
			t.Tools[name] = s
		}
		failed := d["ok"] != true
		s.add(NumberOf(d["duration_ms"]), failed)
		if failed {
			code := str(d["error_code"])
			if code == "" {
				code = "unknown"
			}
			bump(&s.ErrorCodes, code)
		}
	case EventCostRecorded:
		t.CostUSD = NumberOf(d["run_usd"]) // the running total, not a sum
	case EventApprovalRequested:
		if t.asked == nil {
			t.asked = map[string]time.Time{}
		}
		t.asked[ev.RunID+"\x00"+str(d["tool"])] = ev.TS
	case EventApprovalDecided:
		k := ev.RunID + "\x00" + str(d["tool"])
		if at, ok := t.asked[k]; ok {
			t.IdleS += ev.TS.Sub(at).Seconds()
			delete(t.asked, k)
		}
	case EventGuardrailBlocked:
		if _, isCall := d["disposition"]; isCall {
			t.Blocked++
			bump(&t.BlockedByTool, str(d["tool"]))
		}
	case EventCostCircuitOpen:
		bump(&t.CircuitTrips, str(d["reason"]))
	case EventBudgetExceeded:
		bump(&t.Exhaustions, str(d["which"]))
	case EventRunCancelled:
		t.Cancellations++
	}
}

// Overview is the flat, dashboard-shaped summary.
func (t *Telemetry) Overview() map[string]any {
	t.mu.Lock()
	defer t.mu.Unlock()
	rate := func(n, errs int) float64 {
		if n == 0 {
			return 1
		}
		return float64(n-errs) / float64(n)
	}
	toolCalls, toolErrs := 0, 0
	names := make([]string, 0, len(t.Tools))
	for n, s := range t.Tools {
		toolCalls += s.Count
		toolErrs += s.Errors
		names = append(names, n)
	}
	sort.Strings(names)
	trips, exh := 0, 0
	for _, n := range t.CircuitTrips {
		trips += n
	}
	for _, n := range t.Exhaustions {
		exh += n
	}
	return map[string]any{
		"total_run_time_s": t.TotalS, "idle_wait_s": t.IdleS, "active_time_s": t.TotalS - t.IdleS,
		"llm_requests": t.LLM.Count, "llm_success_rate": rate(t.LLM.Count, t.LLM.Errors), "total_tokens": t.LLM.Tokens,
		"total_cost_usd": t.CostUSD, "tool_calls": toolCalls, "tool_success_rate": rate(toolCalls, toolErrs),
		"blocked_calls": t.Blocked, "circuit_trips": trips, "budget_exhaustions": exh, "cancellations": t.Cancellations,
		"tools": names,
	}
}
