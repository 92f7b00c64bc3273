package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
	yaml "go.yaml.in/yaml/v3"
)

// The fields a policy and its rules may have, and the kind of value each
// takes. The shape check reads the document's YAML nodes so that every
// problem it finds carries the line it is on, and so that one bad field
// does not hide the others.
type fieldKind int

const (
	kindString fieldKind = iota
	kindInt
	kindStrings
	kindRules
)

var (
	policyFields = map[string]fieldKind{"policy_id": kindString, "description": kindString, "on_error": kindString, "rules": kindRules}
	ruleFields   = map[string]fieldKind{
		"rule_id": kindString, "description": kindString, "condition": kindString, "severity": kindString,
		"weight": kindInt, "controls": kindStrings, "on_error": kindString, "action": kindString,
	}
)

// lines records where a policy's rules and their fields are in its file.
type lines struct {
	rules []map[string]int // per rule: field → line; "" → the rule's own line
	// literal[i] is true when rule i's condition is a literal block
	// (condition: |), whose lines map one to one onto the file's
	literal []bool
}

// ruleLine is the file line of a rule's field (its own line when the
// field is absent), 0 when unknown.
func (l *lines) ruleLine(i int, field string) int {
	if l == nil || i < 0 || i >= len(l.rules) {
		return 0
	}
	if n, ok := l.rules[i][field]; ok {
		return n
	}
	return l.rules[i][""]
}

// conditionLine maps a line inside rule i's condition onto the file.
func (l *lines) conditionLine(i, line int) int {
	n := l.ruleLine(i, "condition")
	if l == nil || n == 0 || line < 1 || i >= len(l.literal) || !l.literal[i] {
		return n
	}
	return n + line // a literal block starts on the line after its key
}

// checkShape walks the document's nodes. It returns the problems found
// (each with its line), the positions of the rules, and the document with
// every bad or unknown field removed, so the rest can still be read.
func checkShape(data []byte) ([]Problem, *lines, []byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return []Problem{{Message: "the file is empty: a policy needs policy_id and rules"}}, nil, nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return []Problem{{FileLine: root.Line, Message: fmt.Sprintf("the document is %s, not a mapping: a policy starts with policy_id: and rules:", describe(root))}}, nil, nil, nil
	}
	var probs []Problem
	pos := &lines{}
	keep := fieldsOf(root, policyFields, -1, -1, "", &probs, func(key string, v *yaml.Node) bool {
		if key != "rules" {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			if v.Tag == "!!null" {
				return true
			}
			probs = append(probs, Problem{Field: "rules", field: "rules", FileLine: v.Line, Message: fmt.Sprintf("is %s, not a list of rules (- rule_id: …)", describe(v))})
			return false
		}
		var rules []*yaml.Node
		for i, r := range v.Content {
			if r.Kind == yaml.AliasNode && r.Alias != nil {
				r = r.Alias // - *shared_rule
			}
			if r.Kind != yaml.MappingNode {
				probs = append(probs, Problem{Field: fmt.Sprintf("rules[%d]", i), FileLine: r.Line, rule: len(rules) + 1,
					Message: fmt.Sprintf("is %s, not a rule (rule_id:, condition:, severity: …)", describe(r))})
				continue
			}
			at := map[string]int{"": r.Line}
			literal := false
			id := ruleIDOf(r)
			idx := len(rules)
			r.Content = fieldsOf(r, ruleFields, idx, i, id, &probs, func(key string, v *yaml.Node) bool {
				at[key] = v.Line
				if key == "condition" {
					literal = v.Style&yaml.LiteralStyle != 0
				}
				return true
			})
			pos.rules = append(pos.rules, at)
			pos.literal = append(pos.literal, literal)
			rules = append(rules, r)
		}
		v.Content = rules
		return true
	})
	root.Content = keep
	if len(probs) == 0 {
		return nil, pos, data, nil
	}
	cleaned, err := yaml.Marshal(&doc)
	if err != nil {
		return probs, pos, nil, nil
	}
	return probs, pos, cleaned, nil
}

// fieldsOf checks a mapping's keys and values against fields and returns
// its content without the bad ones. each is called for every good field
// and may refuse it. idx is the rule's index among the rules kept (-1 for
// the policy), at its index in the file.
func fieldsOf(m *yaml.Node, fields map[string]fieldKind, idx, at int, ruleID string, probs *[]Problem, each func(string, *yaml.Node) bool) []*yaml.Node {
	var keep []*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if first, dup := seen[k.Value]; dup && k.Kind == yaml.ScalarNode && k.Tag != "!!merge" {
			// YAML readers keep the last silently; a policy should not
			*probs = append(*probs, Problem{RuleID: ruleID, Field: k.Value, FileLine: k.Line, rule: idx + 1, field: k.Value,
				Message: fmt.Sprintf("given twice (lines %d and %d): keep one", first, k.Line)})
			continue
		}
		seen[k.Value] = k.Line
		if k.Tag == "!!merge" { // <<: *shared — the YAML reader merges it
			keep = append(keep, k, v)
			continue
		}
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			name = "(" + describe(k) + " as a key)"
		}
		prob := Problem{RuleID: ruleID, Field: name, FileLine: k.Line, rule: idx + 1, field: k.Value}
		if idx >= 0 && ruleID == "" {
			prob.Field = fmt.Sprintf("rules[%d].%s", at, name)
		}
		kind, known := fields[k.Value]
		switch {
		case !known:
			names := make([]string, 0, len(fields))
			for n := range fields {
				names = append(names, n)
			}
			slices.Sort(names)
			prob.Message = "unknown field"
			if near := closest(k.Value, names); near != "" {
				prob.Message += fmt.Sprintf(" (did you mean %s?)", near)
			}
			prob.Message += ": expected one of " + strings.Join(names, ", ")
		case v.Tag == "!!null":
			// the same as leaving it out
		default:
			prob.Message = wrongKind(k.Value, kind, v)
		}
		if prob.Message != "" {
			*probs = append(*probs, prob)
			continue
		}
		if each(k.Value, v) {
			keep = append(keep, k, v)
		}
	}
	return keep
}

// wrongKind says what is wrong with v as a value of the given kind, or "".
func wrongKind(field string, kind fieldKind, v *yaml.Node) string {
	switch kind {
	case kindString:
		if v.Kind == yaml.ScalarNode && YAML11Bool(v) {
			return fmt.Sprintf("%s reads as a boolean in YAML 1.1, which troy's reader follows: quote it (\"%s\")", v.Value, v.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag != "!!bool" && v.Tag != "!!int" && v.Tag != "!!float" {
			return ""
		}
		if field == "condition" && v.Kind == yaml.ScalarNode {
			return fmt.Sprintf("is %s, not an expression: conditions are text, such as step.type == 'tool_call'; quote it (\"%s\") if you mean that literally", describe(v), v.Value)
		}
		if v.Kind == yaml.ScalarNode {
			return fmt.Sprintf("is %s, not text: quote it (\"%s\")", describe(v), v.Value)
		}
		return fmt.Sprintf("is %s, not text", describe(v))
	case kindInt:
		if v.Kind == yaml.ScalarNode && v.Tag == "!!int" {
			return ""
		}
		return fmt.Sprintf("is %s, not a whole number", describe(v))
	case kindStrings:
		if v.Kind != yaml.SequenceNode {
			return fmt.Sprintf("is %s, not a list of text (e.g. [SOC 2 CC6.1])", describe(v))
		}
		for _, e := range v.Content {
			if e.Kind == yaml.AliasNode && e.Alias != nil {
				e = e.Alias
			}
			if e.Kind != yaml.ScalarNode {
				return fmt.Sprintf("holds %s (line %d), not text", describe(e), e.Line)
			}
			if YAML11Bool(e) {
				return fmt.Sprintf("holds %s (line %d), which reads as a boolean in YAML 1.1: quote it (\"%s\")", e.Value, e.Line, e.Value)
			}
		}
	}
	return ""
}

// describe names a node's value for a message: "the YAML boolean true".
func describe(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch v.Tag {
	case "!!bool":
		return "the YAML boolean " + v.Value
	case "!!int", "!!float":
		return "the number " + v.Value
	case "!!null":
		return "empty"
	}
	return fmt.Sprintf("the text %q", v.Value)
}

func ruleIDOf(r *yaml.Node) string {
	for i := 0; i+1 < len(r.Content); i += 2 {
		if r.Content[i].Value == "rule_id" && r.Content[i+1].Kind == yaml.ScalarNode && r.Content[i+1].Tag != "!!null" {
			return r.Content[i+1].Value
		}
	}
	return ""
}

// closest is the name within two edits of s, or "".
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := levenshtein.ComputeDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// YAML11Bool says whether a plain scalar that YAML 1.2 reads as text (yes,
// no, on, off, y, n) is a boolean to a YAML 1.1 reader, as troy's policy
// reader is: such text must be quoted.
func YAML11Bool(v *yaml.Node) bool {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return false
	}
	switch v.Value {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF":
		return true
	}
	return false
}
