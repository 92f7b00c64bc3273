package explain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/troy-audit/troy/pkg/execgraph"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/trace"
)

// SourceLLM marks explanations written by a model.
const SourceLLM = "llm"

// PromptVersion is part of every cache key: change the prompts, bump it.
const PromptVersion = "troy-explain-v1"

// Chatter is what the LLM explainer needs of a client.
type Chatter interface {
	Chat(ctx context.Context, msgs []llm.Message, jsonMode bool) (llm.Reply, error)
	Model() string
}

// Cache stores explanations by content key.
type Cache interface {
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Put(ctx context.Context, key string, value []byte) error
}

// Usage counts an explainer's LLM calls for one trace (or, summed, a batch).
type Usage struct {
	Model            string  `json:"model"`
	Calls            int     `json:"calls"`
	CachedSteps      int     `json:"cached_steps"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// Add sums usage.
func (u *Usage) Add(o Usage) {
	if u.Model == "" {
		u.Model = o.Model
	} else if o.Model != "" && o.Model != u.Model {
		u.Model = "mixed"
	}
	u.Calls += o.Calls
	u.CachedSteps += o.CachedSteps
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.CostUSD += o.CostUSD
}

// LLM explains steps with a model. A step whose answer stays malformed after
// one corrective retry, or whose call fails, gets the heuristic explanation,
// marked as such, and the trace a warning; an audit never fails for it.
type LLM struct {
	Client Chatter
	Cache  Cache // optional
	Window int   // neighbouring steps shown on each side (default 2)
}

// stepOutcome is one step's explanation and what it cost.
type stepOutcome struct {
	Step     Step   `json:"step"`
	Raw      string `json:"raw"`
	fallback string // why the heuristic was used, if it was
	usage    Usage
	cached   bool
}

// Explain implements the explainer stage's Explainer.
func (x *LLM) Explain(ctx context.Context, t *trace.Trace, g execgraph.Graph) (Trace, error) {
	heur := Heuristic(t, g)
	out := Trace{Source: SourceLLM, Steps: make(map[string]Step, len(t.Steps)), Responses: map[string]string{},
		Usage: &Usage{Model: x.Client.Model()}}
	results := make([]stepOutcome, len(t.Steps))
	var wg sync.WaitGroup
	for i := range t.Steps {
		wg.Go(func() { results[i] = x.step(ctx, t, g, i, heur.Steps[t.Steps[i].StepID]) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Trace{}, err // a cancelled trace is redelivered; its cached steps cost nothing then
	}
	var fallbacks []string
	for i, r := range results {
		id := t.Steps[i].StepID
		out.Steps[id] = r.Step
		if r.Raw != "" {
			out.Responses["step_"+safeName(id)+".txt"] = r.Raw
		}
		out.Usage.Add(r.usage)
		if r.cached {
			out.Usage.CachedSteps++
		}
		if r.fallback != "" {
			fallbacks = append(fallbacks, fmt.Sprintf("step %s: %s", id, r.fallback))
		}
	}
	if len(fallbacks) > 0 {
		out.Source = "mixed"
		if len(fallbacks) == len(t.Steps) {
			out.Source = SourceHeuristic
		}
		sort.Strings(fallbacks)
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d of %d steps have heuristic explanations because the LLM could not explain them: %s",
			len(fallbacks), len(t.Steps), strings.Join(fallbacks, "; ")))
	}
	summary, raw, usage, err := x.summary(ctx, t, out)
	out.Usage.Add(usage)
	if err != nil {
		out.Summary = heur.Summary
		out.Warnings = append(out.Warnings, "the trace summary is heuristic: "+err.Error())
	} else {
		out.Summary = summary
		out.Responses["trace_summary.txt"] = raw
	}
	return out, nil
}

func (x *LLM) step(ctx context.Context, t *trace.Trace, g execgraph.Graph, i int, heuristic Step) stepOutcome {
	msgs := stepPrompt(t, g, i, x.window())
	key := x.key(msgs)
	if x.Cache != nil {
		if b, ok, err := x.Cache.Get(ctx, key); err == nil && ok {
			var r stepOutcome
			if json.Unmarshal(b, &r) == nil {
				r.cached = true
				return r
			}
		}
	}
	fallback := func(why string, raw string, u Usage) stepOutcome {
		return stepOutcome{Step: heuristic, Raw: raw, fallback: why, usage: u}
	}
	var usage Usage
	var raws []string
	for attempt := 0; attempt < 2; attempt++ {
		reply, err := x.Client.Chat(ctx, msgs, true)
		if err != nil {
			return fallback(err.Error(), strings.Join(raws, rawSeparator), usage)
		}
		usage.Add(x.count(reply))
		raws = append(raws, reply.Content)
		st, perr := parseStep(reply.Content)
		if perr == nil {
			st.StepID, st.Source, st.FedBy = t.Steps[i].StepID, SourceLLM, heuristic.FedBy
			r := stepOutcome{Step: st, Raw: strings.Join(raws, rawSeparator), usage: usage}
			if x.Cache != nil {
				if b, err := json.Marshal(r); err == nil {
					_ = x.Cache.Put(ctx, key, b) // a cache miss next time only costs a call
				}
			}
			return r
		}
		msgs = append(msgs, llm.Message{Role: "assistant", Content: reply.Content},
			llm.Message{Role: "user", Content: "That answer is not usable: " + perr.Error() + ". Reply with only the JSON object described above."})
	}
	return fallback("the model's answer was malformed twice", strings.Join(raws, rawSeparator), usage)
}

const rawSeparator = "\n\n----- corrective retry -----\n\n"

func (x *LLM) window() int {
	if x.Window > 0 {
		return x.Window
	}
	return 2
}

func (x *LLM) count(r llm.Reply) Usage {
	return Usage{Model: x.Client.Model(), Calls: 1, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, CostUSD: r.CostUSD}
}

// key is the content key of a prompt: model, prompt version and messages.
func (x *LLM) key(msgs []llm.Message) string {
	h := sha256.New()
	h.Write([]byte(PromptVersion + "\x00" + x.Client.Model()))
	for _, m := range msgs {
		h.Write([]byte("\x00" + m.Role + "\x00" + m.Content))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (x *LLM) summary(ctx context.Context, t *trace.Trace, ex Trace) (string, string, Usage, error) {
	var b strings.Builder
	for _, s := range t.Steps {
		e := ex.Steps[s.StepID]
		fmt.Fprintf(&b, "- %s (%s %s): %s", s.StepID, s.Type, s.Name, e.Why)
		if len(e.Risks) > 0 {
			fmt.Fprintf(&b, " Risks: %s.", strings.Join(e.Risks, "; "))
		}
		b.WriteByte('\n')
	}
	msgs := []llm.Message{
		{Role: "system", Content: summarySystem},
		{Role: "user", Content: "Agent: " + escapeData(t.AgentName) + "\n" + dataOpen + "\n" + escapeData(b.String()) + dataClose},
	}
	key := x.key(msgs)
	if x.Cache != nil {
		if v, ok, err := x.Cache.Get(ctx, key); err == nil && ok {
			return string(v), string(v), Usage{}, nil
		}
	}
	reply, err := x.Client.Chat(ctx, msgs, false)
	if err != nil {
		return "", "", Usage{}, err
	}
	u := x.count(reply)
	text := strings.TrimSpace(reply.Content)
	if text == "" {
		return "", reply.Content, u, errors.New("the model returned an empty summary")
	}
	if x.Cache != nil {
		_ = x.Cache.Put(ctx, key, []byte(text))
	}
	return text, reply.Content, u, nil
}

// safeName keeps a step id usable in a file name.
func safeName(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == ':' {
			return '_'
		}
		return r
	}, id)
}
