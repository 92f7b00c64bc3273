package stream

import (
	"encoding/base64"
	"time"
)

// Start is the body of a start message (and, optionally, of an end): the
// agent and the trace metadata. Given at the start, they are final, and the
// rules that read them are decided as steps arrive.
type Start struct {
	AgentName string         `json:"agent_name,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	// Reason, on an end, says why the trace ended (the idle sweep's).
	Reason string `json:"reason,omitempty"`
}

// Tombstone is kept in the streams bucket once a trace has ended, so what
// comes after its end is refused (HTTP 409) instead of starting it again.
type Tombstone struct {
	EndSeq uint64    `json:"end_seq"` // the end message's stream sequence
	Why    string    `json:"why"`
	At     time.Time `json:"at"`
}

// EndedKey is a trace's tombstone in the streams bucket.
func EndedKey(traceID string) string { return "ended." + b64(traceID) }

// StartedKey is set when a trace was started with its agent and metadata,
// so an end cannot bring other metadata than the start gave.
func StartedKey(traceID string) string { return "started." + b64(traceID) }

func b64(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }
