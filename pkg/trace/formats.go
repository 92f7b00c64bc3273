package trace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	gojson "github.com/goccy/go-json"
)

// Formats troy reads.
const (
	FormatAuto     = "auto"
	FormatTroy     = "troy"     // troy's own trace (the seed format)
	FormatMessages = "messages" // OpenAI chat messages: a list, {messages}, or tau-bench {traj}
	FormatOTLP     = "otlp"     // OTLP/JSON trace exports: read by pkg/otlp, not here
)

// Formats lists the accepted --format values.
var Formats = []string{FormatAuto, FormatTroy, FormatMessages, FormatOTLP}

// ParseAny reads one document in any supported format (auto-detected unless
// format names one) and returns it in canonical form. fallbackID names a
// trace whose format carries no id (chat logs): the caller passes something
// stable, such as the file and line it came from.
func ParseAny(data []byte, lim Limits, format, fallbackID string) (*Trace, error) {
	data = TrimBOM(data)
	if lim.MaxBytes > 0 && len(data) > lim.MaxBytes {
		return Parse(data, lim) // reports the size problem
	}
	if format == "" {
		format = FormatAuto
	}
	switch format {
	case FormatTroy:
		return Parse(data, lim)
	case FormatAuto, FormatMessages:
	case FormatOTLP:
		return nil, &InvalidError{Problems: []Problem{{Message: "OTLP exports are read by pkg/otlp (the ingest service does)"}}}
	default:
		return nil, &InvalidError{Problems: []Problem{{Message: fmt.Sprintf("format %q is not one of %s", format, strings.Join(Formats, ", "))}}}
	}
	trimmed := bytes.TrimSpace(data)
	if format == FormatAuto && (len(trimmed) == 0 || trimmed[0] != '[') && !looksLikeChat(trimmed) {
		return Parse(data, lim)
	}
	var doc any
	if err := gojson.Unmarshal(data, &doc); err != nil {
		return Parse(data, lim) // its JSON error message has the position
	}
	if list, ok := doc.([]any); ok && format == FormatAuto && len(list) > 0 {
		if _, isObj := list[0].(map[string]any); !isObj { // neither a trace nor a chat log: say what it is
			return nil, &InvalidError{Problems: []Problem{{Message: fmt.Sprintf(
				"the input is a JSON list of %d %s: not a troy trace (an object with trace_id, agent_name and steps) nor a chat log (a list of message objects); formats tried: troy, messages (--format otlp reads OTLP/JSON)",
				len(list), jsonKind(list[0]))}}}
		}
	}
	msgs, meta, id, agent, problem := chatDocument(doc)
	if problem != "" {
		return nil, &InvalidError{Problems: []Problem{{Message: problem}}}
	}
	if id == "" {
		id = fallbackID
	}
	if id == "" {
		sum := sha256.Sum256(trimmed)
		id = "chat-" + hex.EncodeToString(sum[:8])
	}
	if agent == "" {
		agent = "agent"
	}
	var v validator
	v.lim = lim
	if err := ValidateID(id); err != nil {
		v.add("id", "%v", err)
	}
	t := v.messages(id, agent, msgs)
	if lim.MaxSteps > 0 && len(t.Steps) > lim.MaxSteps {
		v.add("messages", "makes %d steps, over the %d-step limit: split the run or raise the limit (--max-steps)", len(t.Steps), lim.MaxSteps)
	}
	if len(v.problems) > 0 {
		return nil, &InvalidError{TraceID: id, Problems: v.problems}
	}
	t.Metadata = meta
	return t, nil
}

// looksLikeChat peeks at an object's keys without decoding it twice.
func looksLikeChat(obj []byte) bool {
	if len(obj) == 0 || obj[0] != '{' {
		return false
	}
	// Only which top-level keys are present matters: values are skipped,
	// not decoded (a map of raw values was 40% of ingest's time).
	var keys struct {
		Steps    present `json:"steps"`
		Messages present `json:"messages"`
		Traj     present `json:"traj"`
	}
	if gojson.Unmarshal(obj, &keys) != nil {
		return false
	}
	return !bool(keys.Steps) && bool(keys.Messages || keys.Traj)
}

// present records that a key was there, whatever its value.
type present bool

// UnmarshalJSON implements json.Unmarshaler.
func (p *present) UnmarshalJSON([]byte) error { *p = true; return nil }

// chatDocument finds the message list in the wrappers seen in the wild: a
// bare list, {messages: […]} (Invariant), {traj: […], task_id, reward, info}
// (tau-bench).
func chatDocument(doc any) (msgs []any, meta map[string]any, id, agent, problem string) {
	switch d := doc.(type) {
	case []any:
		return d, nil, "", "", ""
	case map[string]any:
		meta = map[string]any{}
		if m, ok := d["metadata"].(map[string]any); ok {
			meta = m
		}
		id, _ = d["trace_id"].(string)
		if id == "" {
			id, _ = d["id"].(string)
		}
		agent, _ = d["agent_name"].(string)
		if list, ok := d["messages"].([]any); ok {
			return list, meta, id, agent, ""
		}
		if list, ok := d["traj"].([]any); ok { // tau-bench
			for _, k := range []string{"task_id", "trial", "reward", "info"} {
				if v, ok := d[k]; ok {
					meta[k] = v
				}
			}
			if id == "" && d["task_id"] != nil {
				id = fmt.Sprintf("task-%v-trial-%v", d["task_id"], d["trial"])
			}
			return list, meta, id, agent, ""
		}
		return nil, nil, "", "", "not a chat log: expected a list of messages, {messages: […]} or {traj: […]}"
	}
	return nil, nil, "", "", "not a chat log: expected a JSON list or object"
}

// jsonKind names what a JSON value is, in the plural, for an error.
func jsonKind(v any) string {
	switch v.(type) {
	case float64, gojson.Number:
		return "numbers"
	case string:
		return "strings"
	case bool:
		return "booleans"
	case []any:
		return "lists"
	case nil:
		return "nulls"
	}
	return "values"
}
