// Package bus connects troy to NATS JetStream: the embedded server, client
// connections, topology provisioning, subjects and headers, and the consumer
// loop with its middleware.
package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/troy-audit/troy/pkg/trace"
)

// Stages name the subjects troy.<stage>.<run>.
const (
	StageIngest   = "ingest"
	StageTrace    = "trace"
	StageGraph    = "graph"
	StageEval     = "eval"
	StageScore    = "score"
	StageExplain  = "explain"
	StageReport   = "report"
	StageRejected = "rejected"
	StageDLQ      = "dlq"
	// StageViolations is troy.violations.<severity>.<rule_id>: findings
	// for SIEMs (pkg/ocsf).
	StageViolations = "violations"
)

// LiveRun is the run of traces streamed in outside any batch.
const LiveRun = "live"

// Headers every pipeline message carries forward.
const (
	HeaderMsgID      = "Nats-Msg-Id"
	HeaderRun        = "Troy-Run"        // the batch (run) a trace belongs to
	HeaderSource     = "Troy-Source"     // where the trace came from: file, file:line
	HeaderKey        = "Troy-Key"        // stable id of one input within a run
	HeaderPolicy     = "Troy-Policy"     // policy content hash
	HeaderFormat     = "Troy-Format"     // input format (auto when absent)
	HeaderAgent      = "Troy-Agent"      // streamed steps: the agent's name
	HeaderStreamed   = "Troy-Streamed"   // a trace assembled from streamed steps: its findings are already out
	HeaderReason     = "Troy-Reason"     // dead letters: why
	HeaderOrigin     = "Troy-Origin"     // dead letters: original subject
	HeaderStage      = "Troy-Stage"      // dead letters: the stage that gave up
	HeaderDeliveries = "Troy-Deliveries" // dead letters: delivery attempts
)

// Subject returns troy.<stage>.<run>.
func Subject(stage, run string) string { return "troy." + stage + "." + run }

// Wildcard returns troy.<stage>.> .
func Wildcard(stage string) string { return "troy." + stage + ".>" }

// RunOf returns the run token of a troy.<stage>.<run> subject.
func RunOf(subject string) string {
	parts := strings.SplitN(subject, ".", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[2]
}

var runPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidRun reports whether s can be a run token in a subject.
func ValidRun(s string) bool { return runPattern.MatchString(s) && s != "step" && s != "end" }

// Streamed steps and trace ends: troy.ingest.step.<trace_id>,
// troy.ingest.end.<trace_id>.
const (
	StepPrefix = "troy.ingest.step."
	EndPrefix  = "troy.ingest.end."
)

// ValidTraceToken reports whether a trace id is valid (trace.ValidateID) and
// can end a subject: no spaces or wildcards, no empty tokens.
func ValidTraceToken(id string) bool {
	if trace.ValidateID(id) != nil || strings.ContainsAny(id, " \t\r\n*>") || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") || strings.Contains(id, "..") {
		return false
	}
	return true
}

// Key derives the stable id of one input of a run: every stage's message id and
// the reporter's join entries use it, so redeliveries collapse onto one report.
func Key(run, source, traceID string) string {
	h := sha256.New()
	h.Write([]byte(run))
	h.Write([]byte{0})
	if source != "" {
		h.Write([]byte(source))
	} else {
		h.Write([]byte(traceID))
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// ValidKey reports whether k is a key as Key makes them (20 hex digits): a
// stage that uses a received key in a KV key or subject checks it first.
func ValidKey(k string) bool {
	if len(k) != 20 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// MsgID is the Nats-Msg-Id of a stage's output for one input and policy.
func MsgID(stage, key, policyHash string) string {
	p := strings.TrimPrefix(policyHash, "sha256:")
	if len(p) > 16 {
		p = p[:16]
	}
	return stage + "." + key + "." + p
}

// PolicyKey turns a policy hash into a KV key (KV keys allow no colon).
func PolicyKey(hash string) string { return strings.TrimPrefix(hash, "sha256:") }
