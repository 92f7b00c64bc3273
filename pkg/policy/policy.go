// Package policy loads troy policies and evaluates their expr-lang conditions
// over canonical traces.
package policy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Severities, most severe first.
const (
	SeverityCritical = "critical"
	SeverityHigh     = "high"
	SeverityMedium   = "medium"
	SeverityLow      = "low"
)

// Severities lists the accepted severities, most severe first.
var Severities = []string{SeverityCritical, SeverityHigh, SeverityMedium, SeverityLow}

// SeverityRank orders severities: higher is more severe; 0 means unknown.
func SeverityRank(s string) int {
	for i, v := range Severities {
		if v == s {
			return len(Severities) - i
		}
	}
	return 0
}

// Default values applied to rules that leave them out.
const (
	DefaultSeverity = SeverityMedium
	DefaultWeight   = 10
)

// Policy is a set of rules, versioned by the hash of its normalised content.
type Policy struct {
	PolicyID    string `json:"policy_id" jsonschema:"minLength=1"`
	Description string `json:"description,omitempty"`
	Rules       []Rule `json:"rules" jsonschema:"minItems=1"`
	// OnError is what the guard does, in enforce mode, when a rule cannot
	// be evaluated on the checked action: block (the default) or allow.
	// A rule's own on_error wins.
	OnError string `json:"on_error,omitempty" jsonschema:"enum=block,enum=allow,default=block"`

	lines *lines // where the rules are in the file it was read from
}

// What the guard does when a rule errors on the checked action.
const (
	OnErrorBlock = "block"
	OnErrorAllow = "allow"
)

// Rule flags every step on which its condition is true.
type Rule struct {
	RuleID      string `json:"rule_id" jsonschema:"minLength=1"`
	Description string `json:"description,omitempty"`
	Condition   string `json:"condition" jsonschema:"minLength=1"`
	Severity    string `json:"severity,omitempty" jsonschema:"enum=critical,enum=high,enum=medium,enum=low,default=medium"`
	Weight      *int   `json:"weight,omitempty" jsonschema:"minimum=0,default=10"`
	// Controls names the compliance controls the rule evidences, e.g.
	// "SOC 2 CC6.1", "HIPAA 164.312(b)", "OWASP LLM01".
	Controls []string `json:"controls,omitempty"`
	// OnError overrides the policy's on_error for this rule.
	OnError string `json:"on_error,omitempty" jsonschema:"enum=block,enum=allow"`
	// Action is what the rule does when it guards a running agent and
	// would fire on a call: block it, escalate it to a human, or only log
	// (default: critical and high block, medium escalates, low logs).
	Action string `json:"action,omitempty" jsonschema:"enum=block,enum=escalate,enum=log"`
}

// WeightOrDefault is the rule's weight, DefaultWeight when unset.
func (r Rule) WeightOrDefault() int {
	if r.Weight == nil {
		return DefaultWeight
	}
	return *r.Weight
}

// Problem is one thing wrong with a policy, located by rule and, for
// conditions, by line and column inside the condition.
type Problem struct {
	RuleID string `json:"rule_id,omitempty"`
	Field  string `json:"field,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	// FileLine is the line in the policy file the problem is on, when
	// known (Line and Column count inside the condition).
	FileLine int    `json:"file_line,omitempty"`
	Message  string `json:"message"`

	rule  int    // 1 + the index of the rule it is about; 0: the policy
	field string // the field it is about, as written
}

func (p Problem) String() string {
	var b strings.Builder
	if p.FileLine > 0 {
		fmt.Fprintf(&b, "line %d: ", p.FileLine)
	}
	if p.RuleID != "" {
		fmt.Fprintf(&b, "rule %q", p.RuleID)
	}
	if p.Field != "" {
		if p.RuleID != "" {
			b.WriteString(" ")
		}
		b.WriteString(p.Field)
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, " (line %d, column %d)", p.Line, p.Column)
	}
	if p.RuleID != "" || p.Field != "" || p.Line > 0 {
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error lists every problem found in a policy.
type Error struct {
	Source   string // file name, when loaded from a file
	Problems []Problem
}

// ErrInvalid is matched by errors.Is for every *Error.
var ErrInvalid = errors.New("invalid policy")

func (e *Error) Is(target error) bool { return target == ErrInvalid }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid policy")
	if e.Source != "" {
		b.WriteString(" " + e.Source)
	}
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n  - " + p.String())
	}
	return b.String()
}

// Load reads a policy file (JSON or YAML) and validates it.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := Parse(data)
	var pe *Error
	if errors.As(err, &pe) {
		pe.Source = filepath.Base(path)
	}
	return p, err
}

// Parse decodes a policy document (JSON or YAML), applies defaults and checks
// every field. Conditions are checked by Compile; ParseEngine does both.
func Parse(data []byte) (*Policy, error) {
	p, probs := parse(data)
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return p, nil
}

// parse reads as much of a policy as it can. It returns every problem
// found and the policy without the fields they are about (nil when
// nothing could be read), so that later checks can still run.
func parse(data []byte) (*Policy, []Problem) {
	probs, pos, clean, err := checkShape(data)
	switch {
	case err != nil && json.Valid(data):
		// JSON the YAML reader refuses (tab indentation): read it without lines
		probs, pos, clean = nil, nil, data
	case err != nil:
		return nil, []Problem{{Message: "not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	case clean == nil:
		return nil, probs
	}
	js, err := yaml.YAMLToJSON(clean)
	if err != nil {
		return nil, append(probs, Problem{Message: "not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")})
	}
	var p Policy
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, append(probs, Problem{Message: "policy shape: " + err.Error() +
			" (expected policy_id, description, on_error, rules[] of rule_id, description, condition, severity, weight, controls, on_error, action)"})
	}
	p.lines = pos
	// a field the shape check removed is not also "missing"
	removed := map[[2]any]bool{}
	for _, pr := range probs {
		removed[[2]any{pr.rule, pr.field}] = true
	}
	for _, pr := range p.normalize() {
		if !removed[[2]any{pr.rule, pr.field}] {
			probs = append(probs, pr)
		}
	}
	if !bytes.ContainsRune(bytes.TrimSpace(data), '\n') {
		// on a one-line document, "line 1" on every problem says nothing
		p.lines = nil
		for i := range probs {
			probs[i].FileLine = 0
		}
	}
	sortProblems(probs)
	return &p, probs
}

// sortProblems puts problems in file order; those without a line first.
func sortProblems(probs []Problem) {
	slices.SortStableFunc(probs, func(a, b Problem) int { return cmp.Compare(a.FileLine, b.FileLine) })
}

func (p *Policy) normalize() []Problem {
	var probs []Problem
	add := func(rule int, field string, pr Problem) {
		pr.rule, pr.field = rule, field
		if rule > 0 {
			pr.FileLine = p.lines.ruleLine(rule-1, field)
		}
		probs = append(probs, pr)
	}
	if strings.TrimSpace(p.PolicyID) == "" {
		add(0, "policy_id", Problem{Field: "policy_id", Message: "missing: give the policy an id"})
	} else if msg := nameProblem(p.PolicyID); msg != "" {
		add(0, "policy_id", Problem{Field: "policy_id", Message: msg})
	}
	if len(p.Rules) == 0 {
		add(0, "rules", Problem{Field: "rules", Message: "no rules: a policy needs at least one rule"})
	}
	if !validOnError(p.OnError) {
		add(0, "on_error", Problem{Field: "on_error", Message: fmt.Sprintf("%q is not block or allow", p.OnError)})
	}
	seen := map[string]int{}
	for i := range p.Rules {
		r := &p.Rules[i]
		id := r.RuleID
		if strings.TrimSpace(id) == "" {
			add(i+1, "rule_id", Problem{Field: fmt.Sprintf("rules[%d].rule_id", i), Message: "missing: every rule needs an id"})
			id = fmt.Sprintf("rules[%d]", i)
		} else if msg := nameProblem(id); msg != "" {
			add(i+1, "rule_id", Problem{Field: fmt.Sprintf("rules[%d].rule_id", i), Message: msg})
		} else if j, dup := seen[id]; dup {
			add(i+1, "rule_id", Problem{RuleID: id, Field: "rule_id", Message: fmt.Sprintf("duplicate: rules[%d] and rules[%d] share it; rule ids must be unique", j, i)})
		} else {
			seen[id] = i
		}
		if strings.TrimSpace(r.Condition) == "" {
			add(i+1, "condition", Problem{RuleID: id, Field: "condition", Message: "missing: write an expression such as step.type == 'tool_call'"})
		}
		r.Severity = strings.ToLower(strings.TrimSpace(r.Severity))
		if r.Severity == "" {
			r.Severity = DefaultSeverity
		}
		if SeverityRank(r.Severity) == 0 {
			add(i+1, "severity", Problem{RuleID: id, Field: "severity", Message: fmt.Sprintf("%q is not one of %s", r.Severity, strings.Join(Severities, ", "))})
		}
		if !validOnError(r.OnError) {
			add(i+1, "on_error", Problem{RuleID: id, Field: "on_error", Message: fmt.Sprintf("%q is not block or allow", r.OnError)})
		}
		switch r.Action {
		case "", "block", "escalate", "log":
		default:
			add(i+1, "action", Problem{RuleID: id, Field: "action", Message: fmt.Sprintf("%q is not block, escalate or log", r.Action)})
		}
		if r.Weight == nil {
			w := DefaultWeight
			r.Weight = &w
		} else if *r.Weight < 0 {
			add(i+1, "weight", Problem{RuleID: id, Field: "weight", Message: fmt.Sprintf("%d is negative: weights count toward a 0–100 risk score", *r.Weight)})
		}
	}
	return probs
}

// Hash is the policy's content hash: the SHA-256 of its normalised JSON, so
// the same rules give the same hash whether written in YAML or JSON.
func (p *Policy) Hash() string {
	b, _ := json.Marshal(p) // a Policy always marshals
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// maxNameBytes bounds policy and rule ids: they name subjects
// (troy.violations.<severity>.<rule_id>), KV keys and report columns.
const maxNameBytes = 128

// nameProblem says what is wrong with a policy or rule id, or "".
func nameProblem(s string) string {
	switch {
	case len(s) > maxNameBytes:
		return fmt.Sprintf("is %d bytes, over the %d-byte limit: use a shorter id", len(s), maxNameBytes)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("%q contains the control character %U", s, r)
		}
	}
	return ""
}

func validOnError(s string) bool { return s == "" || s == OnErrorBlock || s == OnErrorAllow }

// OnErrorOf is what the guard does when a rule cannot be evaluated on a
// checked action: the rule's on_error, else the policy's, else block.
func (p *Policy) OnErrorOf(ruleID string) string {
	if r, ok := p.Rule(ruleID); ok && r.OnError != "" {
		return r.OnError
	}
	if p.OnError != "" {
		return p.OnError
	}
	return OnErrorBlock
}

// Rule returns the rule with the given id.
func (p *Policy) Rule(id string) (Rule, bool) {
	for _, r := range p.Rules {
		if r.RuleID == id {
			return r, true
		}
	}
	return Rule{}, false
}
