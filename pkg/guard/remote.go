package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// RemoteOptions tune a remote guard client.
type RemoteOptions struct {
	Timeout time.Duration // per check; default 2s
	// FailOpen allows actions when the guard cannot be reached. By default
	// the client fails closed: an unreachable guard blocks.
	FailOpen bool
}

func (o RemoteOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return 2 * time.Second
}

// unreachable is the decision when no guard answered.
func (o RemoteOptions) unreachable(req Request, err error) Decision {
	d := Decision{Decision: Block, Mode: req.Mode, Violations: nil, SessionID: req.SessionID,
		Reason: "guard unreachable, failing closed: " + err.Error()}
	if o.FailOpen {
		d.Decision, d.Reason = Allow, "guard unreachable, failing open: "+err.Error()
	}
	return d
}

// encode checks a request before it leaves, so a bad one is the caller's
// error and never mistaken for an unreachable guard.
func encode(req Request) ([]byte, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(req)
}

// answer reads a reply. A guard's {"error": …} (a bad request, an unknown
// policy) blocks and is returned as the error; a reply that is neither a
// decision nor a guard's error (a proxy's page, an empty 200) means no guard
// answered, and the fail mode decides.
func (o RemoteOptions) answer(req Request, body []byte) (Decision, error) {
	var reply struct {
		Decision
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return o.unreachable(req, fmt.Errorf("the reply is not a guard decision (%s)", snippet(body))), nil
	}
	if reply.Error != "" {
		err := fmt.Errorf("%w: %s", ErrBadRequest, reply.Error)
		return blocked(req, err), err
	}
	if reply.Decision.Decision != Allow && reply.Decision.Decision != Block {
		return o.unreachable(req, fmt.Errorf("the reply has no decision (%s)", snippet(body))), nil
	}
	return reply.Decision, nil
}

// troyError is the message of troy's {"error": …} reply, or "".
func troyError(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error
}

// snippet shows the start of a reply that was not a decision.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	if s == "" {
		return "empty"
	}
	return fmt.Sprintf("%q", s)
}

// NATS asks a guard service over NATS request-reply.
type NATS struct {
	Conn *nats.Conn
	Opts RemoteOptions
}

// Check implements Guard. The decision is always Allow or Block. When no
// guard answers in time, or the reply is not a guard's, the decision is
// block (or allow with FailOpen) with Reason saying why, and err is nil; a
// request the guard refuses (bad, or naming an unknown policy) is Block
// with the error.
func (n *NATS) Check(ctx context.Context, req Request) (Decision, error) {
	body, err := encode(req)
	if err != nil {
		return blocked(req, err), err
	}
	ctx, cancel := context.WithTimeout(ctx, n.Opts.timeout())
	defer cancel()
	msg, err := n.Conn.RequestWithContext(ctx, Subject, body)
	if err != nil {
		return n.Opts.unreachable(req, err), nil
	}
	return n.Opts.answer(req, msg.Data)
}

// ErrRefused is a guard that would not answer this client (no token, or
// one without scope guard).
var ErrRefused = errors.New("guard refused the client")

// HTTP asks a guard over POST /v1/guard/check.
type HTTP struct {
	URL    string // base URL, e.g. http://127.0.0.1:8080
	Token  string // bearer token with scope guard, when troy serve has --http-tokens
	Client *http.Client
	Opts   RemoteOptions
}

// Check implements Guard, failing closed like NATS.
func (h *HTTP) Check(ctx context.Context, req Request) (Decision, error) {
	body, err := encode(req)
	if err != nil {
		return blocked(req, err), err
	}
	ctx, cancel := context.WithTimeout(ctx, h.Opts.timeout())
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(h.URL, "/")+"/v1/guard/check", bytes.NewReader(body))
	if err != nil {
		return blocked(req, err), err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if h.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+h.Token)
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return h.Opts.unreachable(req, err), nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return h.Opts.unreachable(req, err), nil
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && troyError(data) != "":
		// troy's guard is there and refuses this client (no token, or one
		// without scope guard): a configuration to fix, never a reason to
		// fail open. (A proxy's 403 page is no guard answering.)
		err := fmt.Errorf("%w: the guard at %s refused this client: %s: %s", ErrRefused, h.URL, resp.Status, troyError(data))
		return blocked(req, err), err
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity ||
		resp.StatusCode == http.StatusRequestEntityTooLarge:
		// the guard's own refusals carry {"error": …}; anything else from
		// a 4xx is not the guard speaking
	default:
		return h.Opts.unreachable(req, fmt.Errorf("%s from %s (%s)", resp.Status, h.URL, snippet(data))), nil
	}
	return h.Opts.answer(req, data)
}
