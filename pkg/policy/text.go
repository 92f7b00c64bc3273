package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Text renders any value as searchable text: strings as they are, nil as "",
// numbers and booleans as written, and maps and lists as JSON with sorted keys
// (what encoding/json writes, without its reflection cost on every step).
func Text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	bp := textBufs.Get().(*[]byte)
	b, ok := appendJSON((*bp)[:0], v, 0)
	s := string(b)
	*bp = b
	textBufs.Put(bp)
	if ok {
		return s
	}
	out, err := json.Marshal(v) // a type the fast path does not know
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(out)
}

var textBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxTextDepth stops runaway nesting; deeper values fall back to encoding/json.
const maxTextDepth = 64

func appendJSON(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxTextDepth {
		return b, false
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, x), true
	case float64:
		return strconv.AppendFloat(b, x, 'f', -1, 64), true
	case bool:
		return strconv.AppendBool(b, x), true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSON(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendJSON(b, x[k], depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

const hexDigits = "0123456789abcdef"

// appendString writes a JSON string. Text is for searching, so it escapes
// only what JSON requires and keeps <, > and & as they are.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
