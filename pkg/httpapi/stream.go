package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/stream"
	"github.com/troy-audit/troy/pkg/trace"
)

// PolicyLookup resolves a policy id or hash to a compiled policy ("" is the
// server's default).
type PolicyLookup interface {
	Engine(ctx context.Context, ref string) (*policy.Engine, error)
}

// StreamState is the streamer's bucket (which traces were started, which
// ended) as the streaming endpoints read and write it.
type StreamState interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// StreamLog is the step log, where a start checks that no step came first.
type StreamLog interface {
	GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error)
}

// Streaming wires the streaming endpoints.
type Streaming struct {
	Pub        Publisher
	Policies   PolicyLookup
	State      StreamState
	Log        StreamLog
	Partitions int
	Limits     trace.Limits
	// Open bounds one open trace as the streamer does (stream.DefaultLimits
	// when zero): a request that alone is over it is refused (413) rather
	// than taken and dropped.
	Open stream.Limits
	// Policy (an id or hash) applies to traces whose first request names
	// none; "" with no ?policy= is refused.
	Policy string
}

// Start handles POST /v1/traces/{trace_id}/start[?policy=P] with
// {"agent_name": …, "metadata": {…}}: the trace's agent and metadata, up
// front, so the rules that read them are decided as its steps arrive.
func (s Streaming) Start() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, body, ok := s.request(w, r)
		if !ok {
			return
		}
		var st stream.Start
		if err := json.Unmarshal(body, &st); err != nil {
			writeJSON(w, http.StatusBadRequest, Problem{Error: `start body: want {"agent_name": "…", "metadata": {…}}: ` + err.Error()})
			return
		}
		hash, ok := s.policy(w, r)
		if !ok {
			return
		}
		if _, err := s.State.Get(r.Context(), stream.StartedKey(id)); err == nil {
			writeJSON(w, http.StatusConflict, Problem{Error: fmt.Sprintf("trace %s was already started", id)})
			return
		}
		if has, err := s.hasMessages(r.Context(), id); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "reading the step log: " + err.Error()})
			return
		} else if has {
			writeJSON(w, http.StatusConflict, Problem{Error: fmt.Sprintf("trace %s already has steps: a start must come first (or use a new trace id)", id)})
			return
		}
		if _, err := s.State.Create(r.Context(), stream.StartedKey(id), body); errors.Is(err, jetstream.ErrKeyExists) {
			writeJSON(w, http.StatusConflict, Problem{Error: fmt.Sprintf("trace %s was already started", id)})
			return
		} else if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "recording the start: " + err.Error()})
			return
		}
		if err := s.sender().Start(r.Context(), id, body, hash); err != nil {
			_ = s.State.Delete(context.WithoutCancel(r.Context()), stream.StartedKey(id))
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the start; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"trace_id": id, "started": true, "policy": hash})
	})
}

// Steps handles POST /v1/traces/{trace_id}/steps[?agent=A&policy=P]: one
// step or a list, checked at once (400 with every problem; 409 when the
// trace has ended; 4xx when no policy applies) and published on the
// trace's partition for the streamer (202).
func (s Streaming) Steps() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, body, ok := s.request(w, r)
		if !ok {
			return
		}
		steps, err := trace.ParseSteps(body, s.Limits)
		var invalid *trace.InvalidError
		if errors.As(err, &invalid) {
			writeJSON(w, http.StatusBadRequest, Problem{Error: "invalid steps", Problems: invalid.Problems})
			return
		}
		if open := s.open(); (open.MaxSteps > 0 && len(steps) > open.MaxSteps) || (open.MaxBytes > 0 && len(body) > open.MaxBytes) {
			writeJSON(w, http.StatusRequestEntityTooLarge, Problem{Error: fmt.Sprintf(
				"%d steps in %d bytes: over what one open trace may hold (%d steps, %d bytes); send fewer at a time, or a whole trace to POST /v1/traces",
				len(steps), len(body), open.MaxSteps, open.MaxBytes)})
			return
		}
		hash, ok := s.policy(w, r)
		if !ok {
			return
		}
		if err := s.sender().Steps(r.Context(), id, body, r.URL.Query().Get("agent"), hash); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the steps; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"trace_id": id, "steps": len(steps)})
	})
}

// End handles POST /v1/traces/{trace_id}/end, optionally with
// {"agent_name": …, "metadata": {…}} when the start did not give them: the
// trace is complete; its last verdicts and its report follow.
func (s Streaming) End() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, body, ok := s.request(w, r)
		if !ok {
			return
		}
		var st stream.Start
		if len(body) > 0 {
			if err := json.Unmarshal(body, &st); err != nil {
				writeJSON(w, http.StatusBadRequest, Problem{Error: `end body: want nothing, or {"agent_name": "…", "metadata": {…}}: ` + err.Error()})
				return
			}
			if st.Reason != "" {
				writeJSON(w, http.StatusBadRequest, Problem{Error: `end body: "reason" is troy's own (idle ends)`})
				return
			}
		}
		started, err := s.State.Get(r.Context(), stream.StartedKey(id))
		switch {
		case err == nil:
			var begun stream.Start
			_ = json.Unmarshal(started.Value(), &begun)
			if (st.AgentName != "" && st.AgentName != begun.AgentName) || (len(st.Metadata) > 0 && !reflect.DeepEqual(st.Metadata, begun.Metadata)) {
				writeJSON(w, http.StatusConflict, Problem{Error: fmt.Sprintf("trace %s was started with its agent and metadata: its end cannot change them", id)})
				return
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "reading the trace's state: " + err.Error()})
			return
		default:
			if has, err := s.hasMessages(r.Context(), id); err != nil {
				writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "reading the step log: " + err.Error()})
				return
			} else if !has {
				writeJSON(w, http.StatusNotFound, Problem{Error: fmt.Sprintf("trace %s has no steps: nothing to end", id)})
				return
			}
		}
		if err := s.sender().End(r.Context(), id, body); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "the pipeline did not take the end; retry later: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"trace_id": id, "ended": true})
	})
}

func (s Streaming) sender() stream.Sender { return stream.Sender{Pub: s.Pub, Partitions: s.Partitions} }

// request is what every streaming endpoint checks first: the trace id, that
// the trace has not ended, and the body within its limit.
func (s Streaming) request(w http.ResponseWriter, r *http.Request) (id string, body []byte, ok bool) {
	if id, ok = s.traceID(w, r); !ok || !s.notEnded(w, r, id) {
		return "", nil, false
	}
	if body, ok = readBody(w, r, s.Limits.MaxBytes); !ok {
		return "", nil, false
	}
	return id, body, true
}

func (s Streaming) traceID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("trace_id")
	if !bus.ValidTraceToken(id) {
		writeJSON(w, http.StatusBadRequest, Problem{Error: fmt.Sprintf(
			"trace id %q: at most %d bytes of UTF-8, without spaces, control characters, '/', '\\', '*', '>' or empty dot-separated parts", id, trace.MaxIDBytes)})
		return "", false
	}
	return id, true
}

// hasMessages reports whether the step log holds a message of the trace.
func (s Streaming) hasMessages(ctx context.Context, id string) (bool, error) {
	filter := "troy.ingest.*." + fmt.Sprint(bus.Partition(id, s.Partitions)) + "." + id
	_, err := s.Log.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (s Streaming) open() stream.Limits {
	if s.Open.MaxSteps == 0 && s.Open.MaxBytes == 0 {
		return stream.DefaultLimits()
	}
	return s.Open
}

// notEnded answers 409 for a trace that has ended: what comes after an end
// would otherwise be dropped by the streamer.
func (s Streaming) notEnded(w http.ResponseWriter, r *http.Request, id string) bool {
	entry, err := s.State.Get(r.Context(), stream.EndedKey(id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return true
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, Problem{Error: "reading the trace's state: " + err.Error()})
		return false
	}
	var stone stream.Tombstone
	_ = json.Unmarshal(entry.Value(), &stone)
	writeJSON(w, http.StatusConflict, Problem{Error: fmt.Sprintf("trace %s has ended (%s): send further steps under a new trace id", id, stone.Why)})
	return false
}

// policy resolves the request's policy (?policy=, else the server's) to
// its hash, which travels with the message: 400 when there is none, 422
// when it names no stored policy.
func (s Streaming) policy(w http.ResponseWriter, r *http.Request) (string, bool) {
	return resolvePolicy(w, r, s.Policies, s.Policy)
}

func resolvePolicy(w http.ResponseWriter, r *http.Request, policies PolicyLookup, def string) (string, bool) {
	ref := r.URL.Query().Get("policy")
	if ref == "" {
		ref = def
	}
	if ref == "" {
		writeJSON(w, http.StatusBadRequest, Problem{Error: "no policy: start troy serve with --policy FILE, or name a pushed policy with ?policy=ID or ?policy=sha256:…"})
		return "", false
	}
	if policies == nil {
		return ref, true
	}
	e, err := policies.Engine(r.Context(), ref)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, Problem{Error: fmt.Sprintf("policy %q: %v", ref, err)})
		return "", false
	}
	return e.Hash(), true
}

func readBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)+1))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeJSON(w, http.StatusRequestEntityTooLarge, Problem{Error: fmt.Sprintf("over the %d-byte limit: send fewer steps at a time", limit)})
		return nil, false
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, Problem{Error: "reading the body: " + err.Error()})
		return nil, false
	}
	return body, true
}
