package ledger

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// IsCanonical reports whether b is exactly its RFC 8785 form, the test
// jcs.Transform(b) == b, checked in one pass without building anything:
// verifying a ledger spends its time here. FuzzIsCanonical holds it to
// jcs.Transform byte for byte.
func IsCanonical(b []byte) bool {
	c := canonChecker{b: b}
	return c.value() && c.i == len(b)
}

// recordKeys are a record's keys in canonical order: exactly these, so no
// reader (Go's decoder matches keys ignoring case) sees another record.
var recordKeys = []string{"data", "kind", "ledger", "prev_hash", "seq", "ts", "writer"}

// recordFault says why b is not a stored record (canonical JSON with
// exactly the record's keys), or nil when it is.
func recordFault(b []byte) *Fault {
	c := canonChecker{b: b}
	if !c.value() || c.i != len(b) {
		if _, err := jcs.Transform(b); err != nil {
			return &Fault{Kind: "unreadable", Msg: "unreadable: " + err.Error()}
		}
		return &Fault{Kind: "not_canonical", Msg: "not in canonical form"}
	}
	ok := len(c.top) == len(recordKeys)
	for i := 0; ok && i < len(c.top); i++ {
		ok = string(c.top[i]) == recordKeys[i]
	}
	if !ok {
		return &Fault{Kind: "unreadable", Msg: "unreadable: a record has exactly the keys " + strings.Join(recordKeys, ", ")}
	}
	return nil
}

// maxDepth is jcs's nesting limit: deeper documents do not transform.
const maxDepth = 10000

type canonChecker struct {
	b     []byte
	i     int
	depth int
	top   [][]byte // the top-level object's keys, as written
}

func (c *canonChecker) peek() byte {
	if c.i < len(c.b) {
		return c.b[c.i]
	}
	return 0
}

func (c *canonChecker) value() bool {
	switch c.peek() {
	case '{':
		return c.object()
	case '[':
		return c.array()
	case '"':
		_, ok := c.str()
		return ok
	default:
		return c.scalar()
	}
}

func (c *canonChecker) object() bool {
	if c.depth++; c.depth > maxDepth {
		return false
	}
	c.i++ // {
	var prev []byte
	for n := 0; ; n++ {
		if c.peek() == '}' && n == 0 {
			break
		}
		if n > 0 {
			if c.peek() == '}' {
				break
			}
			if c.peek() != ',' {
				return false
			}
			c.i++
		}
		if c.peek() != '"' {
			return false
		}
		key, ok := c.str()
		if !ok || (n > 0 && !keyBefore(prev, key)) || c.peek() != ':' {
			return false
		}
		if c.depth == 1 {
			c.top = append(c.top, key)
		}
		prev = key
		c.i++
		if !c.value() {
			return false
		}
	}
	c.i++ // }
	c.depth--
	return true
}

func (c *canonChecker) array() bool {
	if c.depth++; c.depth > maxDepth {
		return false
	}
	c.i++ // [
	for n := 0; c.peek() != ']'; n++ {
		if n > 0 {
			if c.peek() != ',' {
				return false
			}
			c.i++
		}
		if !c.value() {
			return false
		}
	}
	c.i++ // ]
	c.depth--
	return true
}

// str checks a string in canonical form (only the escapes RFC 8785 writes,
// everything else as valid UTF-8) and returns its body, still escaped.
func (c *canonChecker) str() ([]byte, bool) {
	c.i++ // "
	start := c.i
	for c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			c.i++
			return c.b[start : c.i-1], true
		case ch < 0x20:
			return nil, false
		case ch == '\\':
			if c.i+1 >= len(c.b) {
				return nil, false
			}
			switch c.b[c.i+1] {
			case '\\', '"', 'b', 'f', 'n', 'r', 't':
				c.i += 2
			case 'u': // only \u00xx, lower case, for the controls without a short escape
				if c.i+6 > len(c.b) || string(c.b[c.i+2:c.i+4]) != "00" {
					return nil, false
				}
				v, err := strconv.ParseUint(string(c.b[c.i+4:c.i+6]), 16, 8)
				if err != nil || v >= 0x20 || bytes.ContainsAny(c.b[c.i+4:c.i+6], "ABCDEF") ||
					v == '\b' || v == '\f' || v == '\n' || v == '\r' || v == '\t' {
					return nil, false
				}
				c.i += 6
			default:
				return nil, false
			}
		case ch < utf8.RuneSelf:
			c.i++
		default:
			r, size := utf8.DecodeRune(c.b[c.i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false
			}
			c.i += size
		}
	}
	return nil, false
}

// keyBefore reports whether key a sorts strictly before b by UTF-16 code
// units, as RFC 8785 orders members. Both are canonical string bodies, so
// their only escapes are of control characters, which sort as themselves.
func keyBefore(a, b []byte) bool {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 && isASCII(a) && isASCII(b) {
		return bytes.Compare(a, b) < 0
	}
	ua, ub := utf16Key(a), utf16Key(b)
	for k := 0; k < len(ua) && k < len(ub); k++ {
		if ua[k] != ub[k] {
			return ua[k] < ub[k]
		}
	}
	return len(ua) < len(ub)
}

func isASCII(b []byte) bool {
	for _, ch := range b {
		if ch >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

var shortEscapes = map[byte]rune{'\\': '\\', '"': '"', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func utf16Key(s []byte) []uint16 {
	var runes []rune
	for i := 0; i < len(s); {
		if s[i] == '\\' {
			if s[i+1] == 'u' {
				v, _ := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
				runes = append(runes, rune(v))
				i += 6
				continue
			}
			runes = append(runes, shortEscapes[s[i+1]])
			i += 2
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		runes = append(runes, r)
		i += size
	}
	return utf16.Encode(runes)
}

// numberGrammar is RFC 8259's number.
var numberGrammar = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// scalar checks a literal or a number written as ECMAScript writes it.
func (c *canonChecker) scalar() bool {
	start := c.i
	for c.i < len(c.b) {
		if ch := c.b[c.i]; ch == ',' || ch == ']' || ch == '}' || ch == ':' || ch == '"' || ch == '{' || ch == '[' {
			break
		}
		c.i++
	}
	tok := c.b[start:c.i]
	switch string(tok) {
	case "true", "false", "null":
		return true
	case "", "-0":
		return false
	}
	if plainInt(tok) {
		return true
	}
	if !numberGrammar.Match(tok) {
		return false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	s, err := jcs.NumberToJSON(f)
	return err == nil && s == string(tok)
}

// plainInt is the common case: an integer of at most 15 digits, which a
// double holds exactly and ECMAScript writes as it is.
func plainInt(tok []byte) bool {
	d := tok
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 15 || (d[0] == '0' && len(d) > 1) {
		return false
	}
	for _, ch := range d {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return true
}
