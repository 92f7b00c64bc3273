// Package tools is the agent's tool registry and its built-in tools. A call
// is validated against the tool's JSON Schema before it runs, bounded in
// time, protected from panics, and always answered with a Result: the
// registry never returns an error to the loop.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Safety says what a tool can do to the world; guardrails tier on it.
type Safety string

// Safety classes.
const (
	ReadOnly     Safety = "read_only"
	MutatesState Safety = "mutates_state"
	ExecutesCode Safety = "executes_code"
	Network      Safety = "network"
)

// Spec describes a tool to the model and to the registry.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Safety      Safety          `json:"safety"`
	InputSchema json.RawMessage `json:"input_schema"`
	Returns     string          `json:"returns,omitempty"`
	// Terminal tools end the run when they succeed (submit).
	Terminal bool `json:"terminal,omitempty"`
}

// Tool is one capability. Run must return once ctx is done: the registry
// waits for it (a tool that goes on after its timeout is how side effects
// outlive a run).
type Tool interface {
	Spec() Spec
	Run(ctx context.Context, env *Env, args json.RawMessage) (Output, *Error)
}

// Timed is implemented by tools whose time limit depends on the call
// (execute_code's timeout_s); the registry then allows that long plus a grace.
type Timed interface {
	Timeout(args json.RawMessage) time.Duration
}

// Output is a successful call's result.
type Output struct {
	Content   string         `json:"content"`
	Truncated bool           `json:"truncated,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
	Artifacts []Artifact     `json:"artifacts,omitempty"`
}

// Artifact is a file a tool produced.
type Artifact struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// Call is one tool call as the model made it.
type Call struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Result is the answer to one call.
type Result struct {
	CallID     string `json:"call_id"`
	Tool       string `json:"tool"`
	OK         bool   `json:"ok"`
	Output            // set when OK
	Err        *Error `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// ModelText is what the model reads.
func (r Result) ModelText() string {
	if !r.OK {
		return r.Err.ModelText()
	}
	if r.Truncated && !strings.HasSuffix(r.Content, "[output truncated]") {
		return r.Content + "\n\n[output truncated]"
	}
	return r.Content
}

// ErrorCode is the failure's code, or "" for a success.
func (r Result) ErrorCode() string {
	if r.OK || r.Err == nil {
		return ""
	}
	return string(r.Err.Code)
}

// Env is what a tool may touch during one run. Each run has its own, so no
// state leaks from one run into the next.
type Env struct {
	Root       *os.Root // the workspace, confined
	Scratchpad map[string]any
	Skills     SkillBook
	// Submitted is set by a terminal tool that succeeded.
	Submitted *Submission
	// Notify reports side events (a skill loaded) to the run; may be nil.
	Notify func(event string, data map[string]any)
}

// SkillBook gives load_skill the run's skills.
type SkillBook interface {
	Skill(name string) (body, version string, ok bool)
	Names() []string
}

// Registry holds the tools of a run configuration.
type Registry struct {
	tools   map[string]Tool
	schemas map[string]*jsonschema.Schema
	names   []string
	// DefaultTimeout bounds a call of a tool that is not Timed.
	DefaultTimeout time.Duration
	// Grace is how long past its deadline the registry waits for a tool to
	// stop before reporting it as not stopping.
	Grace time.Duration
}

// DefaultTimeout is the time limit of a call unless the config says otherwise.
const DefaultTimeout = 60 * time.Second

// NewRegistry checks and indexes tools: names are unique and every schema
// compiles.
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}, schemas: map[string]*jsonschema.Schema{},
		DefaultTimeout: DefaultTimeout, Grace: 5 * time.Second}
	c := jsonschema.NewCompiler()
	for _, t := range ts {
		s := t.Spec()
		if s.Name == "" {
			return nil, errors.New("tools: a tool has no name")
		}
		if _, dup := r.tools[s.Name]; dup {
			return nil, fmt.Errorf("tools: two tools are named %q; each name must be unique", s.Name)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(s.InputSchema))
		if err != nil {
			return nil, fmt.Errorf("tools: %s: input schema is not JSON: %w", s.Name, err)
		}
		url := "mem://tools/" + s.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("tools: %s: %w", s.Name, err)
		}
		sch, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("tools: %s: input schema does not compile: %w", s.Name, err)
		}
		r.tools[s.Name], r.schemas[s.Name] = t, sch
		r.names = append(r.names, s.Name)
	}
	sort.Strings(r.names)
	return r, nil
}

// Names are the registered tool names, sorted.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

// Has reports whether a tool is registered.
func (r *Registry) Has(name string) bool { _, ok := r.tools[name]; return ok }

// Specs are the tools' specs, sorted by name.
func (r *Registry) Specs() []Spec {
	out := make([]Spec, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, r.tools[n].Spec())
	}
	return out
}

// Spec is one tool's spec.
func (r *Registry) Spec(name string) (Spec, bool) {
	t, ok := r.tools[name]
	if !ok {
		return Spec{}, false
	}
	return t.Spec(), true
}

// Invoke runs one call and always answers with a Result.
func (r *Registry) Invoke(ctx context.Context, env *Env, call Call) Result {
	start := time.Now()
	res := r.invoke(ctx, env, call)
	res.CallID, res.Tool = call.ID, call.Name
	res.DurationMS = time.Since(start).Milliseconds()
	return res
}

func (r *Registry) invoke(ctx context.Context, env *Env, call Call) Result {
	t, ok := r.tools[call.Name]
	if !ok {
		return fail(Errorf(NotFound, "No tool named `%s` is registered.", call.Name).
			Fix("Available tools: " + strings.Join(r.names, ", ") + "."))
	}
	args := call.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if e := r.validate(call.Name, args); e != nil {
		return fail(e)
	}
	limit := r.DefaultTimeout
	if tt, ok := t.(Timed); ok {
		if d := tt.Timeout(args); d > 0 {
			limit = d
		}
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	type answer struct {
		out Output
		err *Error
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- answer{err: Errorf(Internal, "`%s` raised a panic: %v", call.Name, p)}
			}
		}()
		out, err := t.Run(cctx, env, args)
		done <- answer{out, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-cctx.Done():
		select { // the tool has its context; give it the grace to stop
		case a = <-done:
		case <-time.After(r.Grace):
			return fail(timeoutError(call.Name, limit, ctx).With("stopped", false))
		}
	}
	if cctx.Err() != nil && (a.err == nil || a.err.Code != Timeout) {
		// Finished only because it was stopped: whatever it returned is partial.
		e := timeoutError(call.Name, limit, ctx)
		if a.err != nil {
			for k, v := range a.err.Details {
				e.With(k, v)
			}
		}
		return fail(e)
	}
	if a.err != nil {
		a.err.Retryable = a.err.Code.Retryable()
		return fail(a.err)
	}
	return Result{OK: true, Output: a.out}
}

func timeoutError(name string, limit time.Duration, parent context.Context) *Error {
	if parent.Err() != nil {
		return Errorf(Internal, "`%s` was interrupted: the run was stopped.", name)
	}
	return Errorf(Timeout, "`%s` did not complete within %s.", name, limit).
		Fix("Do less in one call, or raise the tool's time limit.")
}

func fail(e *Error) Result { return Result{Err: e} }

// Validate checks a call's arguments against its tool's schema (nil when
// they fit), so a call can be refused before anyone is asked to approve it.
func (r *Registry) Validate(name string, args json.RawMessage) *Error {
	if _, ok := r.tools[name]; !ok {
		return Errorf(NotFound, "No tool named `%s` is registered.", name).Fix("Available tools: " + strings.Join(r.names, ", ") + ".")
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	return r.validate(name, args)
}

func (r *Registry) validate(name string, args json.RawMessage) *Error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return Errorf(InvalidInput, "The arguments of `%s` are not valid JSON: %v", name, err).
			Fix("Send the arguments as one JSON object.")
	}
	err = r.schemas[name].Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Errorf(InvalidInput, "The arguments of `%s` could not be checked: %v", name, err)
	}
	var lines []string
	var walk func(u *jsonschema.OutputUnit)
	walk = func(u *jsonschema.OutputUnit) {
		if len(u.Errors) == 0 && u.Error != nil {
			loc := strings.TrimPrefix(u.InstanceLocation, "/")
			if loc == "" {
				loc = "(arguments)"
			}
			lines = append(lines, fmt.Sprintf("  - `%s`: %s", loc, u.Error.String()))
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	out := ve.BasicOutput()
	walk(out)
	sort.Strings(lines)
	return Errorf(InvalidInput, "Invalid arguments for `%s`:\n%s", name, strings.Join(lines, "\n")).
		Fix("Re-read the tool's input schema and send only the fields it declares, with the types it declares.")
}
