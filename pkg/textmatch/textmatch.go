// Package textmatch prefilters text for regular expressions: from a pattern
// it derives literals one of which any match must contain, and a cheap
// substring scan rules most text out before the regexp runs.
package textmatch

import (
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// Prefilter holds the literals (lowercase ASCII) one of which any match of
// its pattern contains. The zero Prefilter rules nothing out.
type Prefilter struct{ lits []string }

// NewPrefilter derives the prefilter of a Go regexp pattern. It reads the
// literals case-insensitively, so it is sound for patterns with or without
// (?i); a pattern it cannot read gives the zero Prefilter.
func NewPrefilter(pattern string) Prefilter {
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return Prefilter{}
	}
	lits := requiredLiterals(tree.Simplify())
	for _, l := range lits {
		if l == "" || !IsASCII(l) {
			return Prefilter{}
		}
	}
	return Prefilter{lits: lits}
}

// Literals returns the required literals (nil when none apply).
func (p Prefilter) Literals() []string { return p.lits }

// MayMatch reports whether text could match: false only when it is ASCII
// and holds none of the literals. Non-ASCII text is left to the regexp,
// whose Unicode case folding is the reference.
func (p Prefilter) MayMatch(text string) bool {
	if p.lits == nil || !IsASCII(text) {
		return true
	}
	return p.InText(text)
}

// InText reports whether an ASCII text holds one of the literals, ignoring
// ASCII case.
func (p Prefilter) InText(text string) bool {
	for _, lit := range p.lits {
		if ContainsFoldASCII(text, lit) {
			return true
		}
	}
	return false
}

// requiredLiterals returns literals one of which every match contains, or
// nil when it cannot tell.
func requiredLiterals(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{strings.ToLower(string(re.Rune))}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiterals(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiterals(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []string
		consider := func(lits []string) {
			if lits != nil && shortest(lits) > shortest(best) {
				best = lits
			}
		}
		for _, sub := range re.Sub {
			consider(requiredLiterals(sub))
		}
		// Runs of subexpressions with a small, exact set of matches (A,
		// (?:KIA|SIA), [pousr]) combine into longer literals (akia, asia).
		for i := range re.Sub {
			acc := []string{""}
			for j := i; j < len(re.Sub); j++ {
				set, ok := exactSet(re.Sub[j])
				if !ok {
					break
				}
				if acc = product(acc, set); acc == nil {
					break
				}
				if j > i && !hasEmpty(acc) {
					consider(acc)
				}
			}
		}
		return best
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			lits := requiredLiterals(sub)
			if lits == nil {
				return nil
			}
			out = append(out, lits...)
		}
		return out
	}
	return nil
}

// maxExact bounds the literal sets exactSet and product build.
const maxExact = 64

// exactSet returns every string re can match, lowercased, when that set is
// small; ok is false otherwise.
func exactSet(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{strings.ToLower(string(re.Rune))}, true
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpCapture:
		return exactSet(re.Sub[0])
	case syntax.OpQuest:
		set, ok := exactSet(re.Sub[0])
		return append(set, ""), ok && len(set) < maxExact
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for c := re.Rune[i]; c <= re.Rune[i+1]; c++ {
				if len(out) >= 16 {
					return nil, false
				}
				out = append(out, strings.ToLower(string(c)))
			}
		}
		return dedup(out), true
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			set, ok := exactSet(sub)
			if !ok || len(out)+len(set) > maxExact {
				return nil, false
			}
			out = append(out, set...)
		}
		return dedup(out), true
	case syntax.OpConcat:
		acc := []string{""}
		for _, sub := range re.Sub {
			set, ok := exactSet(sub)
			if !ok {
				return nil, false
			}
			if acc = product(acc, set); acc == nil {
				return nil, false
			}
		}
		return acc, true
	}
	return nil, false
}

// product concatenates every a with every b; nil when over maxExact.
func product(a, b []string) []string {
	if len(a)*len(b) > maxExact {
		return nil
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	return dedup(out)
}

func hasEmpty(set []string) bool {
	for _, s := range set {
		if s == "" {
			return true
		}
	}
	return false
}

func dedup(set []string) []string {
	seen := make(map[string]bool, len(set))
	out := set[:0]
	for _, s := range set {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func shortest(lits []string) int {
	if lits == nil {
		return 0
	}
	n := -1
	for _, l := range lits {
		if n < 0 || len(l) < n {
			n = len(l)
		}
	}
	return n
}

func IsASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// ContainsFoldASCII reports whether lowerLit (lowercase) occurs in s,
// ignoring ASCII case.
func ContainsFoldASCII(s, lowerLit string) bool {
	n := len(lowerLit)
	if n == 0 {
		return true
	}
	first := lowerLit[0]
	for i := 0; i+n <= len(s); i++ {
		if lower(s[i]) != first {
			continue
		}
		j := 1
		for j < n && lower(s[i+j]) == lowerLit[j] {
			j++
		}
		if j == n {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
