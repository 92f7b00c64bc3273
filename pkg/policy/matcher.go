package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/troy-audit/troy/pkg/textmatch"
)

// Matcher is a compiled case-insensitive pattern with a cheap prefilter: the
// literals one of which any match must contain. Most text matches none of
// them, and a substring scan is far cheaper than running the regexp.
type Matcher struct {
	re  *regexp.Regexp
	pre textmatch.Prefilter
	// leafSafe: no required literal holds a JSON structural character, so a
	// literal found in a value's JSON text lies inside one of its leaves.
	leafSafe bool
}

// NewMatcher compiles a case-insensitive pattern, as matches() does.
func NewMatcher(pattern string) (*Matcher, error) {
	re, err := regexp.Compile("(?i)" + pattern)
	if err != nil {
		return nil, fmt.Errorf("matches: bad pattern %q: %w", pattern, err)
	}
	m := &Matcher{re: re, pre: textmatch.NewPrefilter("(?i)" + pattern)}
	m.leafSafe = m.pre.Literals() != nil
	for _, lit := range m.pre.Literals() {
		if strings.ContainsAny(lit, `"{}[]:,\`) {
			m.leafSafe = false
		}
	}
	return m, nil
}

// MatchValue searches a value as matches() does: strings as they are, maps
// and lists as their JSON text. For maps and lists it first looks for the
// required literals leaf by leaf, and renders the JSON only when one occurs.
func (m *Matcher) MatchValue(v any) bool {
	if m.ruledOut(v) {
		return false
	}
	return m.Match(Text(v))
}

// ruledOut reports whether a map or list certainly does not match, because
// no leaf holds a literal the pattern requires.
func (m *Matcher) ruledOut(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		if m.leafSafe {
			found, exact := m.inLeaves(v, 0)
			return exact && !found
		}
	}
	return false
}

// inLeaves reports whether a required literal occurs in a key or scalar of v
// as written in JSON. exact is false when some leaf's JSON differs from its
// text (escapes, non-ASCII), and the answer cannot be trusted.
func (m *Matcher) inLeaves(v any, depth int) (found, exact bool) {
	if depth > maxTextDepth {
		return false, false
	}
	var num [32]byte
	leaf := func(s string) (bool, bool) {
		if !plainJSON(s) {
			return false, false
		}
		return m.pre.InText(s), true
	}
	switch x := v.(type) {
	case nil:
		return leaf("null")
	case string:
		return leaf(x)
	case bool:
		return leaf(strconv.FormatBool(x))
	case float64:
		return leaf(string(strconv.AppendFloat(num[:0], x, 'f', -1, 64)))
	case []any:
		for _, e := range x {
			if f, ok := m.inLeaves(e, depth+1); f || !ok {
				return f, ok
			}
		}
		return false, true
	case map[string]any:
		for k, e := range x {
			if f, ok := leaf(k); f || !ok {
				return f, ok
			}
			if f, ok := m.inLeaves(e, depth+1); f || !ok {
				return f, ok
			}
		}
		return false, true
	}
	return false, false
}

// plainJSON reports whether s is written in JSON exactly as it is: ASCII
// with nothing to escape.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Match reports whether the pattern occurs in text.
func (m *Matcher) Match(text string) bool {
	return m.pre.MayMatch(text) && m.re.MatchString(text)
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
