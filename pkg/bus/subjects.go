// Package bus connects troy to NATS JetStream: client connections,
// topology provisioning, subjects and headers, and the pipeline stages on
// watermill's router over a JetStream Publisher/Subscriber pair.
package bus

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"

	"github.com/troy-audit/troy/pipelines"
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
func ValidRun(s string) bool {
	return runPattern.MatchString(s) && s != StreamStep && s != StreamEnd && s != StreamStart
}

// Streamed traces travel on troy.ingest.<kind>.<partition>.<trace_id>: a
// start (agent and metadata given up front), steps, and the end. Every
// message of a trace goes to the same partition, so one streamer reads
// them, in order.
const (
	StreamStart = "start"
	StreamStep  = "step"
	StreamEnd   = "end"
)

// Partition is the partition of a streamed trace among n (FNV-1a of its
// id): every publisher and every streamer must agree on it.
func Partition(traceID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(traceID); i++ {
		h ^= uint32(traceID[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// StreamSubject is the subject of a streamed trace's message of this kind,
// for a topology of n partitions.
func StreamSubject(kind, traceID string, n int) string {
	return "troy.ingest." + kind + "." + strconv.Itoa(Partition(traceID, n)) + "." + traceID
}

// StreamPartitions is how many partitions streamed traces are spread over:
// the partitions of the streamer's consumer in the topology.
func StreamPartitions(t *pipelines.Topology) int {
	c, _ := t.Consumer(pipelines.ConsumerStreamer)
	return max(c.Partitions, 1)
}

// ParseStreamSubject splits troy.ingest.<kind>.<partition>.<trace_id>.
func ParseStreamSubject(subject string) (kind string, partition int, traceID string, ok bool) {
	rest, found := strings.CutPrefix(subject, "troy.ingest.")
	if !found {
		return "", 0, "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || (parts[0] != StreamStart && parts[0] != StreamStep && parts[0] != StreamEnd) {
		return "", 0, "", false
	}
	p, err := strconv.Atoi(parts[1])
	if err != nil || p < 0 || strconv.Itoa(p) != parts[1] {
		return "", 0, "", false
	}
	return parts[0], p, parts[2], true
}

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
