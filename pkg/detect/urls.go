package detect

import (
	"net/url"
	"regexp"
	"strings"
)

var urlRules = prepare([]rule{
	{kind: "url", description: "URL",
		re: regexp.MustCompile(`(?i)\b(?:https?|ftp)://[^\s"'<>()\[\]{}]+`), valid: func(s string) bool {
			u, err := url.Parse(strings.TrimRight(s, ".,;:!?"))
			return err == nil && u.Host != ""
		}},
})

// URLs finds http, https and ftp URLs, each with its host. Trailing
// punctuation is not part of a URL.
func URLs(text string) []Finding {
	out := scan(text, urlRules)
	for i := range out {
		v := strings.TrimRight(out[i].Value, ".,;:!?")
		out[i].End -= len(out[i].Value) - len(v)
		out[i].Value = v
		if u, err := url.Parse(v); err == nil {
			out[i].Host = strings.ToLower(u.Hostname())
		}
	}
	return out
}
