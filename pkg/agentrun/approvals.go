package agentrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/guardrails"
)

// ApprovalsBucket keeps approvals while they wait and after.
const ApprovalsBucket = pipelines.BucketAgentApprovals

// ApprovalsPrefix + <run_id>: an approval a run waits for, as it is asked.
const ApprovalsPrefix = "troy.agent.approvals."

// Approval statuses.
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired"
)

// DefaultApprovalTimeout denies a call nobody decided on.
const DefaultApprovalTimeout = 5 * time.Minute

// Approval is one call waiting for (or given) a person's decision.
type Approval struct {
	ID        string                     `json:"id"`
	Status    string                     `json:"status"`
	Request   guardrails.ApprovalRequest `json:"request"`
	CreatedAt time.Time                  `json:"created_at"`
	Deadline  time.Time                  `json:"deadline"`
	DecidedAt time.Time                  `json:"decided_at,omitzero"`
	By        string                     `json:"by,omitempty"`
	Reason    string                     `json:"reason,omitempty"`
}

// Approvals asks people over the bus: a request is kept in the bucket and
// published on troy.agent.approvals.<run_id>; `troy approvals approve|deny`
// or POST /v1/approvals/{id} decides it; nobody deciding in time denies.
type Approvals struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	Timeout time.Duration
}

// OpenApprovals opens the bucket.
func OpenApprovals(ctx context.Context, js jetstream.JetStream) (*Approvals, error) {
	kv, err := js.KeyValue(ctx, ApprovalsBucket)
	if err != nil {
		return nil, fmt.Errorf("approvals: bucket %s: %w", ApprovalsBucket, err)
	}
	return &Approvals{kv: kv, js: js, Timeout: DefaultApprovalTimeout}, nil
}

// Kind names this approver in events.
func (a *Approvals) Kind() string { return "nats" }

// WithTimeout is the same bucket with another decision timeout.
func (a *Approvals) WithTimeout(d time.Duration) *Approvals {
	c := *a
	if d > 0 {
		c.Timeout = d
	}
	return &c
}

func approvalKey(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("approval id %q: use the id troy approvals list shows", id)
	}
	return "a." + id, nil
}

// Approve implements guardrails.Approver: it waits for a decision.
func (a *Approvals) Approve(ctx context.Context, req guardrails.ApprovalRequest) (guardrails.Answer, error) {
	if req.ID == "" {
		req.ID = agent.NewID()
	}
	key, err := approvalKey(req.ID)
	if err != nil {
		return guardrails.Answer{}, err
	}
	now := time.Now().UTC()
	rec := Approval{ID: req.ID, Status: Pending, Request: req, CreatedAt: now, Deadline: now.Add(a.Timeout)}
	b, _ := json.Marshal(rec)
	watch, err := a.kv.Watch(ctx, key)
	if err != nil {
		return guardrails.Answer{}, fmt.Errorf("approvals: %w", err)
	}
	defer watch.Stop()
	if _, err := a.kv.Create(ctx, key, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return guardrails.Answer{}, fmt.Errorf("approvals: recording %s: %w", req.ID, err)
	}
	if req.RunID != "" && ValidID(req.RunID) {
		m := nats.NewMsg(ApprovalsPrefix + req.RunID)
		m.Data = b
		m.Header.Set(jetstream.MsgIDHeader, "approval-"+req.ID)
		_, _ = a.js.PublishMsg(ctx, m) // the bucket is the record; this is the notice
	}
	timer := time.NewTimer(time.Until(rec.Deadline))
	defer timer.Stop()
	for {
		select {
		case e, ok := <-watch.Updates():
			if !ok {
				return guardrails.Answer{}, errors.New("approvals: the watch ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var got Approval
			if json.Unmarshal(e.Value(), &got) == nil && got.Status != Pending {
				return answerOf(got), nil
			}
		case <-timer.C:
			got, err := a.expire(context.WithoutCancel(ctx), req.ID)
			if err != nil {
				return guardrails.Answer{}, err
			}
			return answerOf(got), nil
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), agent.ErrRunCancelled) {
				// nobody should approve a call its run no longer wants
				_, _ = a.decide(context.WithoutCancel(ctx), req.ID, Expired, "cancel", "the run was cancelled while the call waited")
			}
			return guardrails.Answer{}, ctx.Err()
		}
	}
}

func answerOf(a Approval) guardrails.Answer {
	return guardrails.Answer{Approved: a.Status == Approved, By: a.By, Reason: a.Reason}
}

// expire denies an approval nobody decided on, unless a decision won the
// race.
func (a *Approvals) expire(ctx context.Context, id string) (Approval, error) {
	got, err := a.decide(ctx, id, Expired, "timeout", fmt.Sprintf("nobody decided within %s", a.Timeout))
	var done *AlreadyDecided
	if errors.As(err, &done) {
		return done.Approval, nil
	}
	return got, err
}

// AlreadyDecided is returned when deciding an approval that was decided.
type AlreadyDecided struct{ Approval Approval }

func (e *AlreadyDecided) Error() string {
	return fmt.Sprintf("approval %s was already %s by %s", e.Approval.ID, e.Approval.Status, e.Approval.By)
}

// ErrNoApproval is returned for an unknown approval id.
var ErrNoApproval = errors.New("no such approval")

// Decide approves or denies a pending approval.
func (a *Approvals) Decide(ctx context.Context, id string, approved bool, by, reason string) (Approval, error) {
	status := Denied
	if approved {
		status = Approved
	}
	if by == "" {
		by = "anonymous"
	}
	return a.decide(ctx, id, status, by, reason)
}

func (a *Approvals) decide(ctx context.Context, id, status, by, reason string) (Approval, error) {
	key, err := approvalKey(id)
	if err != nil {
		return Approval{}, err
	}
	for range 5 { // a concurrent writer: read again
		e, err := a.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Approval{}, fmt.Errorf("approval %s: %w", id, ErrNoApproval)
		}
		if err != nil {
			return Approval{}, fmt.Errorf("approvals: %w", err)
		}
		var rec Approval
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return Approval{}, fmt.Errorf("approval %s is unreadable: %w", id, err)
		}
		if rec.Status != Pending {
			return rec, &AlreadyDecided{rec}
		}
		if status != Expired && time.Now().After(rec.Deadline) {
			// too late: it is denied, whoever answers now
			status, by, reason = Expired, "timeout", fmt.Sprintf("nobody decided before %s", rec.Deadline.Format(time.RFC3339))
			rec.Status, rec.By, rec.Reason, rec.DecidedAt = status, by, reason, time.Now().UTC()
			b, _ := json.Marshal(rec)
			if _, err := a.kv.Update(ctx, key, b, e.Revision()); err == nil || isWrongLastSequence(err) {
				return rec, &AlreadyDecided{rec}
			}
			return Approval{}, fmt.Errorf("approvals: %w", err)
		}
		rec.Status, rec.By, rec.Reason, rec.DecidedAt = status, by, reason, time.Now().UTC()
		b, _ := json.Marshal(rec)
		if _, err := a.kv.Update(ctx, key, b, e.Revision()); err == nil {
			return rec, nil
		} else if !isWrongLastSequence(err) {
			return Approval{}, fmt.Errorf("approvals: %w", err)
		}
	}
	return Approval{}, fmt.Errorf("approval %s: too many concurrent decisions", id)
}

// List returns approvals, pending ones only unless all, oldest first.
func (a *Approvals) List(ctx context.Context, all bool) ([]Approval, error) {
	lister, err := a.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	var out []Approval
	for k := range lister.Keys() {
		e, err := a.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var rec Approval
		if json.Unmarshal(e.Value(), &rec) != nil {
			continue
		}
		if all || rec.Status == Pending {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}
