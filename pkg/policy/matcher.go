package policy

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"unicode/utf8"
)

// Matcher is a compiled case-insensitive pattern with a cheap prefilter: the
// literals one of which any match must contain. Most text matches none of
// them, and a substring scan is far cheaper than running the regexp.
type Matcher struct {
	re       *regexp.Regexp
	required []string // lowercase ASCII; nil when no prefilter applies
}

// NewMatcher compiles a case-insensitive pattern, as matches() does.
func NewMatcher(pattern string) (*Matcher, error) {
	re, err := regexp.Compile("(?i)" + pattern)
	if err != nil {
		return nil, fmt.Errorf("matches: bad pattern %q: %w", pattern, err)
	}
	m := &Matcher{re: re}
	if tree, err := syntax.Parse("(?i)"+pattern, syntax.Perl); err == nil {
		m.required = requiredLiterals(tree.Simplify())
	}
	for _, lit := range m.required {
		if lit == "" || !isASCII(lit) {
			m.required = nil
			break
		}
	}
	return m, nil
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
		for _, sub := range re.Sub {
			if lits := requiredLiterals(sub); lits != nil && shortest(lits) > shortest(best) {
				best = lits
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

// Match reports whether the pattern occurs in text.
func (m *Matcher) Match(text string) bool {
	// The prefilter folds ASCII only; other text goes to the regexp, whose
	// Unicode case folding is the reference.
	if m.required != nil && isASCII(text) {
		found := false
		for _, lit := range m.required {
			if containsFoldASCII(text, lit) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return m.re.MatchString(text)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// containsFoldASCII reports whether lowerLit (lowercase) occurs in s,
// ignoring ASCII case.
func containsFoldASCII(s, lowerLit string) bool {
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

var (
	matcherMu    sync.RWMutex
	matcherCache = map[string]*Matcher{} // patterns built at run time
)

// cachedMatcher compiles a pattern that was not a constant in the condition.
func cachedMatcher(pattern string) (*Matcher, error) {
	matcherMu.RLock()
	m, ok := matcherCache[pattern]
	matcherMu.RUnlock()
	if ok {
		return m, nil
	}
	m, err := NewMatcher(pattern)
	if err != nil {
		return nil, err
	}
	matcherMu.Lock()
	if len(matcherCache) < 4096 { // dynamic patterns could be unbounded
		matcherCache[pattern] = m
	}
	matcherMu.Unlock()
	return m, nil
}
