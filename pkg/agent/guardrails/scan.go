package guardrails

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/troy-audit/troy/pkg/detect"
)

// Severity of a finding.
type Severity string

// Severities.
const (
	Info     Severity = "INFO"
	Warn     Severity = "WARN"
	Critical Severity = "CRITICAL"
)

// Finding is what a scanner saw.
type Finding struct {
	RuleID     string   `json:"rule_id"`
	Severity   Severity `json:"severity"`
	Message    string   `json:"message"`
	Evidence   string   `json:"evidence,omitempty"` // at most 300 characters
	Source     string   `json:"source"`             // arguments, or result:<tool>
	EscalateTo *Tier    `json:"escalate_to,omitempty"`
	Block      bool     `json:"block"`
	Fallback   bool     `json:"fallback,omitempty"` // refused towards a safer path; no human is asked
}

func tierPtr(t Tier) *Tier { return &t }

// ruleOf maps a detector's kind to a rule id and what it does.
type ruleOf struct {
	id       string
	severity Severity
	escalate *Tier
	block    bool
}

var injectionIDs = map[string]ruleOf{
	"override":           {"INJ001", Critical, tierPtr(Danger), false},
	"role_hijack":        {"INJ002", Critical, tierPtr(Danger), false},
	"act_covertly":       {"INJ003", Critical, tierPtr(Danger), false},
	"exfiltrate":         {"INJ004", Critical, tierPtr(Danger), false},
	"hidden_instruction": {"INJ005", Warn, tierPtr(Danger), false},
}

// Credentials that are never passed on: they block before any approver.
var secretIDs = map[string]ruleOf{
	"private_key":       {"EXF001", Critical, nil, true},
	"aws_access_key":    {"EXF002", Critical, nil, true},
	"github_token":      {"EXF003", Critical, nil, true},
	"slack_token":       {"EXF004", Critical, nil, true},
	"azure_account_key": {"EXF005", Critical, nil, true},
	"jwt":               {"EXF006", Warn, tierPtr(Danger), false},
	"generic_secret":    {"EXF007", Warn, tierPtr(Danger), false},
	"credential_store":  {"EXF008", Critical, nil, true},
}

var piiIDs = map[string]ruleOf{
	"email": {"PII001", Info, tierPtr(Warning), false}, "us_ssn": {"PII002", Warn, tierPtr(Warning), false},
	"payment_card": {"PII003", Warn, tierPtr(Warning), false}, "iban": {"PII004", Warn, tierPtr(Warning), false},
	"phone": {"PII005", Info, tierPtr(Warning), false},
}

var destructiveIDs = map[string]ruleOf{
	"recursive_delete": {"DST001", Critical, tierPtr(Danger), false}, "python_tree_delete": {"DST002", Warn, tierPtr(Danger), false},
	"disk_wipe": {"DST003", Critical, tierPtr(Danger), false}, "permission_wipe": {"DST004", Critical, tierPtr(Danger), false},
	"fork_bomb": {"DST005", Critical, tierPtr(Danger), false}, "sql_destroy": {"DST006", Warn, tierPtr(Danger), false},
	"git_history_rewrite": {"DST007", Warn, tierPtr(Danger), false}, "kill_all": {"DST008", Critical, tierPtr(Danger), false},
}

func findings(fs []detect.Finding, ids map[string]ruleOf, source string) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, f := range fs {
		r, ok := ids[f.Kind]
		if !ok || seen[r.id] {
			continue
		}
		seen[r.id] = true
		evidence := clip(f.Value, 300)
		if strings.HasPrefix(r.id, "EXF") && f.Kind != "credential_store" {
			evidence = mask(f.Value) // findings are published: never the secret itself
		}
		out = append(out, Finding{RuleID: r.id, Severity: r.severity, Message: f.Description, Evidence: evidence,
			Source: source, EscalateTo: r.escalate, Block: r.block})
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// textOf joins every string value of decoded arguments, so scanners read
// what the tool will get, not its JSON escaping.
func textOf(v any) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				b.WriteString(k) // keys are text a tool may store too
				b.WriteByte('\n')
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case nil:
		case json.Number:
			b.WriteString(x.String()) // digits as written: a card number stays one
			b.WriteByte('\n')
		default:
			fmt.Fprintf(&b, "%v\n", x)
		}
	}
	walk(v)
	return b.String()
}

// scanArguments runs the argument scanners.
func scanArguments(text string) []Finding {
	var out []Finding
	out = append(out, findings(detect.Secrets(text), secretIDs, "arguments")...)
	out = append(out, findings(detect.CredentialPaths(text), secretIDs, "arguments")...)
	out = append(out, findings(detect.Injection(text), injectionIDs, "arguments")...)
	out = append(out, findings(detect.PII(text), piiIDs, "arguments")...)
	out = append(out, findings(detect.Destructive(text), destructiveIDs, "arguments")...)
	return out
}

// scanResult runs the result scanners (PII too: the reference misses it,
// §5.3).
func scanResult(tool, text string) []Finding {
	src := "result:" + tool
	var out []Finding
	out = append(out, findings(detect.Secrets(text), secretIDs, src)...)
	out = append(out, findings(detect.Injection(text), injectionIDs, src)...)
	out = append(out, findings(detect.PII(text), piiIDs, src)...)
	return out
}

// selfModification finds calls that would change what governs the run:
// writes to protected paths (skills, config, ledger, event files), a
// protected path named in code, reserved scratchpad keys.
func selfModification(tool, op string, args map[string]any, workspace string, protected []string) []Finding {
	var out []Finding
	switch {
	case tool == "file_system" && (op == "file_system:write" || op == "file_system:append" || op == "file_system:delete" || op == "file_system:mkdir"):
		p, _ := args["path"].(string)
		if hit := protectedHit(p, workspace, protected); hit != "" {
			out = append(out, Finding{RuleID: "SLF001", Severity: Critical, Source: "arguments", Block: true, Evidence: clip(p, 300),
				Message: fmt.Sprintf("%s is framework-owned (%s): the agent may not change what governs it", p, hit)})
		}
	case tool == "execute_code":
		code, _ := args["code"].(string)
		for _, pp := range protected {
			name := filepath.Base(pp)
			if strings.Contains(code, pp) || (len(name) > 3 && strings.Contains(code, name)) {
				out = append(out, Finding{RuleID: "SLF002", Severity: Warn, Source: "arguments", EscalateTo: tierPtr(Danger), Evidence: clip(pp, 300),
					Message: "code names a framework-owned path (" + pp + ")"})
				break
			}
		}
	case tool == "scratchpad" && (op == "scratchpad:write" || op == "scratchpad:delete"):
		if k, _ := args["key"].(string); strings.HasPrefix(k, "_") {
			out = append(out, Finding{RuleID: "SLF003", Severity: Critical, Source: "arguments", Block: true, Evidence: k,
				Message: fmt.Sprintf("scratchpad key '%s' is reserved for the framework", k)})
		}
	}
	return out
}

// protectedHit names the protected path p falls in, or "". The path is
// read the way the tools read it (backslashes are separators, `..` is
// resolved) and symlinks on its way are followed, so no spelling reaches a
// protected file the plain one cannot.
func protectedHit(p, workspace string, protected []string) string {
	if p == "" {
		return ""
	}
	abs := p
	if !filepath.IsAbs(p) && !strings.HasPrefix(p, "/") {
		rel := path.Clean(strings.ReplaceAll(p, `\`, "/"))
		abs = filepath.Join(workspace, filepath.FromSlash(rel))
	}
	abs = resolve(filepath.Clean(abs))
	for _, pp := range protected {
		pp = resolve(filepath.Clean(pp))
		if abs == pp || strings.HasPrefix(abs, pp+string(filepath.Separator)) {
			return pp
		}
	}
	return ""
}

// resolve follows symlinks in the longest part of p that exists.
func resolve(p string) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// RedactSecrets replaces every secret the detectors find in the strings of v
// (maps and lists walked, keys too) with [REDACTED:kind], for what leaves
// the run: events, approval requests.
func RedactSecrets(v any) any {
	switch x := v.(type) {
	case string:
		return redactText(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[redactText(k)] = RedactSecrets(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = RedactSecrets(e)
		}
		return out
	}
	return v
}

func redactText(s string) string {
	fs := append(detect.Secrets(s), detect.CredentialPaths(s)...)
	if len(fs) == 0 {
		return s
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Start > fs[j].Start }) // from the end: offsets stay valid
	for _, f := range fs {
		if f.Kind == "credential_store" {
			continue // a path is not a secret; its content would be
		}
		if f.Start >= 0 && f.End <= len(s) && f.Start < f.End {
			s = s[:f.Start] + "[REDACTED:" + f.Kind + "]" + s[f.End:]
		}
	}
	return s
}

// mask shows enough of a secret to recognise it, not to use it.
func mask(v string) string {
	if len(v) <= 8 {
		return "[REDACTED]"
	}
	return v[:4] + "…[REDACTED " + fmt.Sprint(len(v)) + " chars]"
}
