package trace

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDBytes bounds a trace id. Ids name report folders, subjects and KV
// keys; 255 bytes is the longest file name most file systems take.
const MaxIDBytes = 255

// ValidateID checks a trace id from any source (file, HTTP, NATS, OTLP, a
// stage upstream). It refuses what could never be shown or stored faithfully
// (invalid UTF-8, control characters), what reads as a path ('/', '\', "."
// and ".."), and ids over MaxIDBytes. Anything else (spaces, '*', '%',
// non-ASCII letters) is a valid id: report.FileName encodes it on disk.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("is empty: a trace needs an id")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("is %d bytes, over the %d-byte limit: use a shorter id", len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%q is not valid UTF-8: send ids as UTF-8 text", id)
	case id == "." || id == "..":
		return fmt.Errorf("%q cannot be a trace id: it names a folder", id)
	case strings.ContainsAny(id, `/\`):
		return fmt.Errorf("%q contains '/' or '\\': a trace id is one name, not a path", id)
	case strings.TrimSpace(id) != id:
		return fmt.Errorf("%q starts or ends with white space: trim it", id)
	}
	for _, r := range id {
		switch {
		case r == utf8.RuneError:
			// JSON decoders turn invalid UTF-8 into U+FFFD: refuse it rather
			// than audit a trace under an id its sender never wrote.
			return fmt.Errorf("%q contains U+FFFD (invalid UTF-8 in the document?): send ids as UTF-8 text", id)
		case unicode.IsControl(r):
			return fmt.Errorf("%q contains the control character %U: ids are printable text", id, r)
		}
	}
	return nil
}
