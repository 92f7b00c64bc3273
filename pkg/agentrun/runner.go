// Package agentrun runs governed agents on the bus: sessions in the
// troy_agent_sessions bucket, every event on troy.agent.events.<run_id>.…,
// every step streamed into the audit pipeline, the result on
// troy.agent.result.<run_id>. `troy agent run` uses it in-process on the
// embedded server; the agent-runner service uses it for queued requests.
package agentrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/eventsink"
	"github.com/troy-audit/troy/pkg/agent/guardrails"
	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/templates"
)

// DefaultAuditPolicy audits runs whose config names no policy.
const DefaultAuditPolicy = "agent_safety"

// Request asks for one run: a new session (goal and config), or the
// continuation of one (Resume).
type Request struct {
	RunID     string          `json:"run_id"`
	SessionID string          `json:"session_id"`
	Goal      string          `json:"goal,omitempty"`
	Config    json.RawMessage `json:"config,omitempty"` // spec.File with absolute paths
	Workspace string          `json:"workspace,omitempty"`
	// PolicyHash is the stored policy the run is audited against ("" with
	// audit on: the config's audit.policy, resolved by the runner).
	PolicyHash string `json:"policy_hash,omitempty"`
	Resume     bool   `json:"resume,omitempty"`
	// ConfigPath is where the config was read (framework-owned, with the
	// .env beside it).
	ConfigPath string `json:"config_path,omitempty"`
}

// Validate checks a request before anything runs.
func (r Request) Validate() error {
	var probs []string
	if !ValidID(r.RunID) {
		probs = append(probs, fmt.Sprintf("run_id %q: use 1 to 64 letters, digits, - or _", r.RunID))
	}
	if !ValidID(r.SessionID) {
		probs = append(probs, fmt.Sprintf("session_id %q: use 1 to 64 letters, digits, - or _", r.SessionID))
	}
	if !r.Resume {
		if strings.TrimSpace(r.Goal) == "" {
			probs = append(probs, "goal is empty")
		}
		if len(r.Config) == 0 {
			probs = append(probs, "config is missing")
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("run request: %s", strings.Join(probs, "; "))
	}
	return nil
}

// Outcome is published on troy.agent.result.<run_id>.
type Outcome struct {
	agent.Result
	Agent      string   `json:"agent"`
	PolicyHash string   `json:"policy_hash,omitempty"`
	Error      string   `json:"error,omitempty"` // the run could not start
	Problems   []string `json:"problems,omitempty"`
}

// ErrBadRequest marks requests that can never run (bad config, unknown
// session): retrying them is pointless.
var ErrBadRequest = errors.New("bad run request")

// Runner executes run requests.
type Runner struct {
	JS        jetstream.JetStream
	Sessions  *Sessions
	Policies  *policystore.Store
	Streams   jetstream.KeyValue // troy_streams: started traces
	Approvals *Approvals
	Quota     *Quota
	Metrics   *Metrics // nil: none
	// ProviderPolicy is the operator's limit on providers and models.
	ProviderPolicy *spec.ProviderPolicy
	Partitions     int
	Providers      *llm.Providers
	Pricing        *llm.Pricing
	Log            zerolog.Logger
	// Approver decides calls whose config names no approver (the CLI's
	// terminal); nil denies them.
	Approver guardrails.Approver
	// WorkspaceRoot, when set, is the only folder a queued run's workspace
	// may be in: whoever queues a run names the folder its tools touch.
	WorkspaceRoot string
	// WriterName signs the ledger records this runner writes.
	WriterName string
	// Stopping reports that the runner is shutting down (nil: never).
	Stopping func() bool
	// Env resolves ${VAR} in configs (nil: none is resolved). A runner that
	// takes requests from others gives only what its operator listed.
	Env spec.Resolver
	// Settings gives OPENAI_API_KEY and OPENAI_BASE_URL to configs that
	// leave them out (nil: the environment).
	Settings spec.Resolver
}

// ErrInterrupted is returned when the runner itself was stopped (shutdown)
// in the middle of a run: the session is left running, and the request
// should be redelivered so another runner goes on with it.
var ErrInterrupted = errors.New("the runner stopped during the run")

// New opens what a runner needs.
func New(ctx context.Context, js jetstream.JetStream, partitions int, log zerolog.Logger) (*Runner, error) {
	sessions, err := OpenSessions(ctx, js)
	if err != nil {
		return nil, err
	}
	policies, err := policystore.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	streams, err := js.KeyValue(ctx, pipelines.BucketStreams)
	if err != nil {
		return nil, fmt.Errorf("agent runner: bucket %s: %w", pipelines.BucketStreams, err)
	}
	approvals, err := OpenApprovals(ctx, js)
	if err != nil {
		return nil, err
	}
	quota, err := OpenQuota(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Runner{JS: js, Sessions: sessions, Policies: policies, Streams: streams, Approvals: approvals, Quota: quota, Partitions: partitions,
		Providers: llm.DefaultProviders(), Pricing: &llm.Pricing{Prices: llm.DefaultPrices}, Log: log}, nil
}

// Execute runs a request to its end and publishes the outcome. extra sees
// every event too (the CLI's console). The error is for requests that
// could not run at all; it wraps ErrBadRequest when retrying cannot help.
func (r *Runner) Execute(ctx context.Context, req Request, ctl *agent.Control, extra agent.Sink) (Outcome, error) {
	if err := req.Validate(); err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	continuing := false
	defer r.Sessions.Forget(req.SessionID)
	st, err := r.Sessions.Load(ctx, req.SessionID)
	switch {
	case err == nil:
		if st.RunID == req.RunID && st.Status != agent.Running {
			// this run ended, but its result or ack was lost: answer again
			out := outcomeOf(st)
			return out, r.publish(ctx, req.RunID, out)
		}
		if st.Status == agent.Running && st.RunID == req.RunID {
			continuing = true // its runner died mid-run: go on with the same run
		} else if !req.Resume {
			return r.refuse(ctx, req, fmt.Errorf("%w: session %s already exists (resume it)", ErrBadRequest, req.SessionID))
		}
		req = merge(req, st.Origin)
		req.Resume = true
	case errors.Is(err, agent.ErrSessionNotFound):
		if req.Resume {
			return r.refuse(ctx, req, fmt.Errorf("%w: no session %s", ErrBadRequest, req.SessionID))
		}
	default:
		return Outcome{}, fmt.Errorf("loading session %s: %w", req.SessionID, err)
	}
	if err := r.confine(req.Workspace); err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	file, err := spec.ParseWith(req.Config, "in the run request", r.Env)
	if err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	hash := req.PolicyHash
	if hash == "" && (file.Audit.Enabled == nil || *file.Audit.Enabled) {
		if hash, err = r.auditPolicy(ctx, file.Audit.Policy); err != nil {
			return r.refuse(ctx, req, fmt.Errorf("%w: audit policy: %v", ErrBadRequest, err))
		}
		req.PolicyHash = hash
	} else if hash != "" {
		if _, err := r.Policies.ByHash(ctx, hash); err != nil {
			return r.refuse(ctx, req, fmt.Errorf("%w: audit policy %s: %v", ErrBadRequest, hash, err))
		}
	}
	origin := req
	origin.Resume = false
	originJSON, _ := json.Marshal(origin)
	if ctl == nil {
		ctl = &agent.Control{}
	}
	// Stopped from outside the run (the runner shutting down), not by a
	// cancel: the run is not over, only this runner's part of it.
	// The runner itself stopping (shutdown) cancels the run's context: the
	// run is not over, only this runner's part of it. A cancel asked for,
	// or the run's deadline, is an end like any other.
	interrupted := func(status agent.Status) bool {
		_, asked := ctl.Cancelled()
		return status == agent.Cancelled && !asked && ctx.Err() != nil && r.Stopping != nil && r.Stopping()
	}
	hold := func(ev agent.Event) bool {
		return (ev.Type == agent.EventRunEnd || ev.Type == agent.EventRunCancelled) && interrupted(agent.Cancelled)
	}
	events := &Events{JS: r.JS, Hold: hold}
	decisions := &Decisions{JS: r.JS, Writer: r.WriterName, Hold: hold}
	sinks := Sinks{events, decisions}
	if r.Metrics != nil {
		sinks = append(sinks, r.Metrics)
	}
	var feed *Feed
	if hash != "" {
		feed = &Feed{Sender: stream.Sender{Pub: r.JS, Partitions: r.Partitions}, JS: r.JS, Starts: r.Streams, PolicyHash: hash,
			Continuing: continuing, Hold: hold}
		sinks = append(sinks, feed)
	}
	external, err := openSinks(file.Observability)
	if err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	closed := false
	defer func() { // on the paths that end before the run does
		if !closed {
			for _, s := range external {
				s.Close(context.Background())
			}
		}
	}()
	for _, s := range external {
		sinks = append(sinks, s)
	}
	sinks = append(sinks, extra)
	deps := spec.Deps{Providers: r.Providers, Pricing: r.Pricing, Store: r.Sessions, Sink: sinks, Workspace: req.Workspace,
		Settings: r.Settings, Approver: r.Approver, ProviderPolicy: r.ProviderPolicy, Protected: protectedFiles(req.ConfigPath),
		NATSApprover: func(d time.Duration) guardrails.Approver { return r.Approvals.WithTimeout(d) }}
	if hash != "" { // the audit policy also guards the run live
		e, err := r.Policies.ByHash(ctx, hash)
		if err != nil {
			return r.refuse(ctx, req, fmt.Errorf("audit policy %s: %w", hash, err))
		}
		deps.Policy, deps.PolicyRef = &guard.Local{Policies: guard.Static{E: e}, Timeout: 1500 * time.Millisecond}, hash
		deps.Actions = map[string]string{}
		for _, rule := range e.Policy().Rules {
			if rule.Action != "" {
				deps.Actions[rule.RuleID] = rule.Action
			}
		}
	}
	cfg, err := file.Build(deps)
	if err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	cfg.Origin = originJSON
	// A daily quota: refuse to start once it is spent, and never let the
	// run spend more than is left.
	day := time.Now()
	var before float64
	if st != nil {
		before = st.CostUSD
	}
	if daily := file.Cost.DailyUSD; daily > 0 {
		spent, err := r.Quota.Spent(ctx, file.Name, day)
		if err != nil {
			return r.refuse(ctx, req, err)
		}
		left := daily - spent
		if left <= 0 {
			out := Outcome{Agent: file.Name}
			out.RunID, out.SessionID, out.Status = req.RunID, req.SessionID, agent.Exhausted
			out.Answer = fmt.Sprintf("The daily quota of $%.2f for agent %s is spent ($%.4f today); the run did not start.", daily, file.Name, spent)
			out.Evidence, out.UnmetRequirements = []string{}, []string{req.Goal}
			return out, r.publish(ctx, req.RunID, out)
		}
		if cfg.Breaker.MaxUSD <= 0 || before+left < cfg.Breaker.MaxUSD {
			cfg.Breaker.MaxUSD = before + left // the session's ceiling counts what it spent before
		}
	}
	var quota *QuotaSink
	if file.Cost.DailyUSD > 0 { // spend counts against the day as it happens, crash or not
		quota = &QuotaSink{Q: r.Quota, Agent: file.Name, Day: day}
		cfg.Sink = append(cfg.Sink.(Sinks), quota)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return r.refuse(ctx, req, fmt.Errorf("%w: %v", ErrBadRequest, err))
	}
	var res agent.Result
	if req.Resume {
		res, err = a.Resume(ctx, req.SessionID, ctl, agent.WithRunID(req.RunID))
	} else {
		res, err = a.Run(ctx, req.Goal, ctl, agent.WithRunID(req.RunID), agent.WithSessionID(req.SessionID))
	}
	if err != nil {
		bad := errors.Is(err, agent.ErrNotResumable) || errors.Is(err, agent.ErrSessionNotFound)
		if bad {
			err = fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		return r.refuse(ctx, req, err)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	var quotaProblem []string
	if quota != nil {
		quotaProblem = quota.Errors()
	}
	var sinkProblems []string
	for _, s := range external {
		sinkProblems = append(sinkProblems, s.Close(fctx)...)
	}
	closed = true
	if interrupted(res.Status) {
		if st, err := r.Sessions.Load(fctx, req.SessionID); err == nil {
			// as it was before this runner's end was written over it
			st.Status, st.Final, st.FinalAnswer = agent.Running, nil, ""
			if err := r.Sessions.Save(fctx, st); err != nil {
				return Outcome{}, fmt.Errorf("%w; and marking session %s to go on failed: %v", ErrInterrupted, req.SessionID, err)
			}
		}
		events.Flush(fctx)
		if feed != nil {
			feed.Flush(fctx)
		}
		return Outcome{}, ErrInterrupted
	}
	out := Outcome{Result: res, Agent: file.Name, PolicyHash: hash}
	out.Problems = append(append(append(append(res.Problems, events.Flush(fctx)...), sinkProblems...), quotaProblem...), decisions.Errors()...)
	if feed != nil {
		feed.Flush(fctx)
		out.Problems = append(out.Problems, feed.Errors()...)
	}
	for _, p := range out.Problems {
		r.Log.Warn().Str("run_id", req.RunID).Msg(p)
	}
	return out, r.publish(fctx, req.RunID, out)
}

// merge fills a resume request from the session's original request.
func merge(req Request, origin json.RawMessage) Request {
	var o Request
	if json.Unmarshal(origin, &o) != nil {
		return req
	}
	if len(req.Config) == 0 {
		req.Config = o.Config
	}
	if req.Workspace == "" {
		req.Workspace = o.Workspace
	}
	if req.PolicyHash == "" {
		req.PolicyHash = o.PolicyHash
	}
	return req
}

func outcomeOf(st *agent.State) Outcome {
	res := agent.Result{Status: st.Status, Answer: st.FinalAnswer, Iterations: st.Iteration, TotalTokens: st.Usage.Total(),
		CostUSD: st.CostUSD, SessionID: st.SessionID, RunID: st.RunID, Evidence: []string{}, UnmetRequirements: []string{}}
	if st.Final != nil {
		res.Confidence, res.Evidence, res.UnmetRequirements = st.Final.Confidence, st.Final.Evidence, st.Final.UnmetRequirements
	}
	return Outcome{Result: res, Agent: st.Agent}
}

func (r *Runner) refuse(ctx context.Context, req Request, err error) (Outcome, error) {
	out := Outcome{Error: err.Error()}
	out.RunID, out.SessionID, out.Status = req.RunID, req.SessionID, agent.Failed
	if ValidID(req.RunID) && errors.Is(err, ErrBadRequest) {
		if perr := r.publish(ctx, req.RunID, out); perr != nil {
			r.Log.Warn().Err(perr).Msg("publishing a refused run's outcome")
		}
	}
	return out, err
}

func (r *Runner) publish(ctx context.Context, runID string, out Outcome) error {
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	m := nats.NewMsg(ResultPrefix + runID)
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, "result-"+runID+"-"+string(out.Status))
	if _, err := r.JS.PublishMsg(context.WithoutCancel(ctx), m); err != nil {
		return fmt.Errorf("publishing the result of %s: %w", runID, err)
	}
	return nil
}

// auditPolicy stores the run's audit policy (a file, or a bundled
// template; the default when none is named) and returns its hash.
func (r *Runner) auditPolicy(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		ref = DefaultAuditPolicy
	}
	var p *policy.Policy
	var err error
	if fi, serr := os.Stat(ref); serr == nil && !fi.IsDir() {
		var l *policy.Loaded
		if l, err = policy.LoadEngine(ref, policy.Options{}); err == nil {
			p = l.Policy()
		}
	} else if strings.ContainsAny(ref, `/\`) || filepath.Ext(ref) != "" {
		return "", fmt.Errorf("%s: no such file", ref)
	} else {
		p, err = templates.Load(ref)
	}
	if err != nil {
		return "", err
	}
	if _, err := policy.Compile(p); err != nil {
		return "", err
	}
	return r.Policies.Put(ctx, p)
}

// openSinks opens the config's events file and endpoints.
func openSinks(o spec.Observability) ([]eventsink.Sink, error) {
	var out []eventsink.Sink
	if o.EventsFile != "" {
		j, err := eventsink.OpenJSONL(o.EventsFile, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	for _, s := range o.Sinks {
		h := http.Header{}
		for k, v := range s.Headers {
			h.Set(k, v)
		}
		switch s.Type {
		case "otlp":
			out = append(out, eventsink.OTLP(s.URL, h, s.EventTypes))
		default:
			out = append(out, eventsink.HTTP(s.URL, h, s.EventTypes))
		}
	}
	return out, nil
}

// protectedFiles are the files that decide how a run behaves: its config,
// the .env beside it, and the .env this process reads.
func protectedFiles(configPath string) []string {
	var out []string
	if configPath != "" && filepath.IsAbs(configPath) {
		out = append(out, configPath, filepath.Join(filepath.Dir(configPath), ".env"))
	}
	if env, err := filepath.Abs(".env"); err == nil {
		out = append(out, env)
	}
	return out
}

// confine refuses a workspace outside WorkspaceRoot (links followed).
func (r *Runner) confine(ws string) error {
	if r.WorkspaceRoot == "" {
		return nil
	}
	if ws == "" {
		return fmt.Errorf("the workspace must be named and lie in %s", r.WorkspaceRoot)
	}
	root, err := filepath.EvalSymlinks(r.WorkspaceRoot)
	if err != nil {
		return fmt.Errorf("workspace root %s: %w", r.WorkspaceRoot, err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", ws, err)
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("workspace %s is outside %s, the only folder this runner works in", ws, r.WorkspaceRoot)
	}
	return nil
}
