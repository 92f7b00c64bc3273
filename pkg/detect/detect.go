// Package detect finds sensitive or hostile content in text: personal data,
// secrets, prompt injections and URLs. Policies call these as pii(), secrets(),
// injection() and urls(); the agent runtime's guardrails reuse them.
package detect

import (
	"math"
	"regexp"
	"strings"

	"github.com/troy-audit/troy/pkg/textmatch"
)

// Finding is one match. Kind names what was found (email, aws_access_key,
// override, …); Value is the matched text.
type Finding struct {
	Kind        string `json:"kind"`
	Description string `json:"description"`
	Value       string `json:"value"`
	Start       int    `json:"start"`
	End         int    `json:"end"`
	Host        string `json:"host,omitempty"` // urls only
}

// Map renders a finding for the policy language, where `.kind` and `.id`
// (the same) read it.
func (f Finding) Map() map[string]any {
	m := map[string]any{"id": f.Kind, "kind": f.Kind, "description": f.Description, "value": f.Value, "start": f.Start, "end": f.End}
	if f.Host != "" {
		m["host"] = f.Host
	}
	return m
}

// MaxText bounds how much of a text the detectors read, so a huge input
// costs a bounded amount; findings past it are not reported.
const MaxText = 1 << 20

// rule is one detector pattern with an optional check on its match.
type rule struct {
	kind, description string
	re                *regexp.Regexp
	group             int               // submatch holding the value (0: whole match)
	valid             func(string) bool // nil: every match counts
	// standalone: not part of a longer run of digit groups, so the middle of
	// a card or account number is not a phone number.
	standalone bool
	pre        textmatch.Prefilter // set by prepare
}

// prepare derives each rule's prefilter: most text holds none of a rule's
// required literals, and skipping the regexp then is most of the speed.
func prepare(rules []rule) []rule {
	for i := range rules {
		rules[i].pre = textmatch.NewPrefilter(rules[i].re.String())
	}
	return rules
}

func scan(text string, rules []rule) []Finding {
	if len(text) > MaxText {
		text = text[:MaxText]
	}
	var out []Finding
	ascii := textmatch.IsASCII(text)
	for _, r := range rules {
		if ascii && r.pre.Literals() != nil && !r.pre.InText(text) {
			continue // none of the literals every match holds
		}
		for _, loc := range r.re.FindAllStringSubmatchIndex(text, -1) {
			s, e := loc[2*r.group], loc[2*r.group+1]
			if s < 0 {
				continue
			}
			v := text[s:e]
			if (r.valid != nil && !r.valid(v)) || overlaps(out, s, e) || (r.standalone && inDigitRun(text, s, e)) {
				continue
			}
			out = append(out, Finding{Kind: r.kind, Description: r.description, Value: v, Start: s, End: e})
		}
	}
	return out
}

// overlaps reports whether [s, e) overlaps a finding already made. Rules are
// ordered most specific first, so a card number is not also a phone number.
func overlaps(fs []Finding, s, e int) bool {
	for _, f := range fs {
		if s < f.End && f.Start < e {
			return true
		}
	}
	return false
}

// inDigitRun reports whether text[s:e] continues into more digits, directly
// or across one separator.
func inDigitRun(text string, s, e int) bool {
	isDigit := func(i int) bool { return i >= 0 && i < len(text) && text[i] >= '0' && text[i] <= '9' }
	isSep := func(i int) bool { return i >= 0 && i < len(text) && strings.IndexByte(" .-", text[i]) >= 0 }
	return isDigit(e) || (isSep(e) && isDigit(e+1)) || isDigit(s-1) || (isSep(s-1) && isDigit(s-2))
}

func digits(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// entropy is the Shannon entropy of s in bits per character.
func entropy(s string) float64 {
	if s == "" {
		return 0
	}
	counts := map[rune]int{}
	n := 0
	for _, c := range s {
		counts[c]++
		n++
	}
	var h float64
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	return h
}
