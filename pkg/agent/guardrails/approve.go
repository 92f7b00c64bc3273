package guardrails

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ApprovalRequest is what an approver is shown.
type ApprovalRequest struct {
	ID        string    `json:"id,omitempty"`
	Tool      string    `json:"tool"`
	Arguments any       `json:"arguments"`
	Tier      Tier      `json:"tier"`
	Findings  []Finding `json:"findings"`
	RunID     string    `json:"run_id"`
	SessionID string    `json:"session_id"`
	Iteration int       `json:"iteration"`
	Goal      string    `json:"goal"`
	Rationale string    `json:"rationale"`
	Agent     string    `json:"agent,omitempty"`
}

// Answer is an approver's decision.
type Answer struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
	Reason   string `json:"reason"`
}

// Approver decides calls at or above the approval threshold. An error
// blocks the call.
type Approver interface {
	Approve(ctx context.Context, req ApprovalRequest) (Answer, error)
}

// AllowUpTo approves calls up to a tier ceiling (the "auto" approver).
type AllowUpTo struct{ Ceiling Tier }

// Approve implements Approver.
func (a AllowUpTo) Approve(_ context.Context, r ApprovalRequest) (Answer, error) {
	if r.Tier <= a.Ceiling {
		return Answer{Approved: true, By: "policy", Reason: fmt.Sprintf("tier %s within ceiling %s", r.Tier, a.Ceiling)}, nil
	}
	return Answer{By: "policy", Reason: fmt.Sprintf("tier %s > ceiling %s", r.Tier, a.Ceiling)}, nil
}

// DenyAll denies every call it is asked about.
type DenyAll struct{}

// Approve implements Approver.
func (DenyAll) Approve(_ context.Context, r ApprovalRequest) (Answer, error) {
	return Answer{By: "policy", Reason: fmt.Sprintf("all %s-tier calls are denied (no approver is configured)", r.Tier)}, nil
}

// Terminal asks a person at the terminal; only "y" or "yes" approves, and
// end of input denies.
type Terminal struct {
	In  io.Reader
	Out io.Writer

	mu sync.Mutex
	sc *bufio.Scanner
}

// Approve implements Approver.
func (t *Terminal) Approve(ctx context.Context, r ApprovalRequest) (Answer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sc == nil {
		t.sc = bufio.NewScanner(t.In)
	}
	args, _ := json.MarshalIndent(r.Arguments, "  ", "  ")
	fmt.Fprintf(t.Out, "\n=== approval needed: %s call to %s (run %s, iteration %d)\n  goal: %s\n  why: %s\n  arguments: %s\n",
		r.Tier, r.Tool, r.RunID, r.Iteration, r.Goal, r.Rationale, args)
	for _, f := range r.Findings {
		fmt.Fprintf(t.Out, "  finding %s (%s): %s\n", f.RuleID, f.Severity, f.Message)
	}
	fmt.Fprint(t.Out, "approve? [y/N] ")
	line := make(chan string, 1)
	go func() {
		if t.sc.Scan() {
			line <- t.sc.Text()
		}
		close(line)
	}()
	select {
	case s, ok := <-line:
		if !ok {
			return Answer{By: "terminal", Reason: "no answer (end of input)"}, nil
		}
		s = strings.ToLower(strings.TrimSpace(s))
		if s == "y" || s == "yes" {
			return Answer{Approved: true, By: "terminal", Reason: "approved at the terminal"}, nil
		}
		return Answer{By: "terminal", Reason: "denied at the terminal"}, nil
	case <-ctx.Done():
		return Answer{}, ctx.Err()
	}
}

// Webhook POSTs the request as JSON. The answer is final ({approved, by,
// reason}) or says where to poll ({"poll_url": …}); a timeout, an
// unreachable endpoint or a malformed answer denies.
type Webhook struct {
	URL          string
	Header       http.Header
	Client       *http.Client
	PollInterval time.Duration // default 2 s
	Timeout      time.Duration // default 5 min
}

type webhookAnswer struct {
	Approved *bool  `json:"approved"`
	By       string `json:"by"`
	Reason   string `json:"reason"`
	PollURL  string `json:"poll_url"`
	Status   string `json:"status"` // "pending" while polling
}

// Approve implements Approver.
func (w *Webhook) Approve(ctx context.Context, r ApprovalRequest) (Answer, error) {
	timeout, poll := w.Timeout, w.PollInterval
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	if poll <= 0 {
		poll = 2 * time.Second
	}
	client := w.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deny := func(why string) (Answer, error) { return Answer{By: "webhook", Reason: why}, nil }
	body, _ := json.Marshal(r)
	ans, err := w.call(ctx, client, http.MethodPost, w.URL, body)
	for err == nil && ans.Approved == nil && ans.PollURL != "" {
		select {
		case <-time.After(poll):
		case <-ctx.Done():
			return deny(fmt.Sprintf("no decision within %s", timeout))
		}
		ans, err = w.call(ctx, client, http.MethodGet, ans.PollURL, nil)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return deny(fmt.Sprintf("no decision within %s", timeout))
	case err != nil:
		return deny("the approval webhook failed: " + err.Error())
	case ans.Approved == nil:
		return deny("the approval webhook answered without a decision")
	}
	by := ans.By
	if by == "" {
		by = "webhook"
	}
	return Answer{Approved: *ans.Approved, By: by, Reason: ans.Reason}, nil
}

func (w *Webhook) call(ctx context.Context, client *http.Client, method, url string, body []byte) (webhookAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return webhookAnswer{}, err
	}
	for k, vs := range w.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return webhookAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return webhookAnswer{}, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var a webhookAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a); err != nil {
		return webhookAnswer{}, fmt.Errorf("malformed answer: %w", err)
	}
	if a.Status == "pending" && a.PollURL == "" {
		a.PollURL = url // keep polling where we are
	}
	return a, nil
}
