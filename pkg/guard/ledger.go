package guard

import (
	"github.com/troy-audit/troy/pkg/ledger"
)

// LedgerRecorder writes one ledger record per decision: through a
// *ledger.Batcher, so a check does not wait for the ledger, or a
// *ledger.Writer, which waits (one-shot checks).
type LedgerRecorder struct {
	L interface {
		Add(kind string, data map[string]any) error
	}
}

// Record implements Recorder. Through a batcher, the record is built when
// it is written, off the check's path (the request is not changed after
// its check).
func (r LedgerRecorder) Record(req Request, d Decision) error {
	if b, ok := r.L.(*ledger.Batcher); ok {
		return b.AddEntry(ledger.Entry{Kind: "guard", Build: func() map[string]any { return DecisionRecord(req, d) }})
	}
	return r.L.Add("guard", DecisionRecord(req, d))
}

// DecisionRecord is what the ledger keeps of a decision: who asked to do
// what (the input as a hash: it may hold secrets), under which policy
// version, the answer and the rules behind it.
func DecisionRecord(req Request, d Decision) map[string]any {
	violated := make([]any, 0, len(d.Violations))
	for _, v := range d.Violations {
		violated = append(violated, map[string]any{"rule_id": v.RuleID, "severity": v.Severity})
	}
	errored := make([]any, 0, len(d.RuleErrors))
	for _, e := range d.RuleErrors {
		errored = append(errored, e.RuleID)
	}
	return map[string]any{
		"decision": d.Decision, "mode": d.Mode, "reason": d.Reason,
		"policy_id": d.PolicyID, "policy_hash": d.PolicyHash, "session_id": req.SessionID,
		"agent":      req.Agent.Name,
		"action":     map[string]any{"type": req.Action.Type, "name": req.Action.Name, "input_sha256": ledger.Digest(req.Action.Input)},
		"violations": violated, "rule_errors": errored,
	}
}
