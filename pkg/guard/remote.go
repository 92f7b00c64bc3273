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

// answer decodes a guard's reply; an error reply is a bad request, never a
// transport failure, so it is returned as an error and not failed open.
func answer(body []byte) (Decision, error) {
	var reply struct {
		Decision
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return Decision{}, fmt.Errorf("guard reply is not a decision: %w", err)
	}
	if reply.Error != "" {
		return Decision{}, fmt.Errorf("%w: %s", ErrBadRequest, reply.Error)
	}
	if reply.Decision.Decision != Allow && reply.Decision.Decision != Block {
		return Decision{}, fmt.Errorf("guard reply has no decision")
	}
	return reply.Decision, nil
}

// NATS asks a guard service over NATS request-reply.
type NATS struct {
	Conn *nats.Conn
	Opts RemoteOptions
}

// Check implements Guard. When no guard answers in time the decision is
// block (or allow with FailOpen) and Reason says why; err is nil.
func (n *NATS) Check(ctx context.Context, req Request) (Decision, error) {
	body, err := encode(req)
	if err != nil {
		return Decision{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.Opts.timeout())
	defer cancel()
	msg, err := n.Conn.RequestWithContext(ctx, Subject, body)
	if err != nil {
		return n.Opts.unreachable(req, err), nil
	}
	return answer(msg.Data)
}

// HTTP asks a guard over POST /v1/guard/check.
type HTTP struct {
	URL    string // base URL, e.g. http://127.0.0.1:8080
	Client *http.Client
	Opts   RemoteOptions
}

// Check implements Guard, failing closed like NATS.
func (h *HTTP) Check(ctx context.Context, req Request) (Decision, error) {
	body, err := encode(req)
	if err != nil {
		return Decision{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.Opts.timeout())
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(h.URL, "/")+"/v1/guard/check", bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
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
	if resp.StatusCode >= 500 {
		return h.Opts.unreachable(req, errors.New(resp.Status+": "+strings.TrimSpace(string(data)))), nil
	}
	return answer(data)
}
