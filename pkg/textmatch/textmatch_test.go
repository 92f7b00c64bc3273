package textmatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequiredLiterals(t *testing.T) {
	cases := map[string][]string{
		`SELECT|INSERT|DROP`:                  {"select", "insert", "drop"},
		`ignore (all )?previous instructions`: {"ignore all previous instructions", "ignore previous instructions"},
		`\bdrop\s+table\b`:                    {"table"},
		`(foo)+bar`:                           {"foo"},
		`a*`:                                  nil,
		`x|y*`:                                nil,
		`[0-9]{3}-[0-9]{4}`:                   {"-"},
		`system update|run as admin|ignore (all)`: {"system update", "run as admin", "ignore all"},
	}
	for pattern, want := range cases {
		assert.Equal(t, want, NewPrefilter("(?i)"+pattern).Literals(), pattern)
	}
}

func TestMayMatch(t *testing.T) {
	p := NewPrefilter(`AKIA[0-9A-Z]{16}`)
	assert.True(t, p.MayMatch("key akiaXYZ"), "case is ignored: a superset is safe")
	assert.False(t, p.MayMatch("no keys here"))
	assert.True(t, p.MayMatch("clé sans ASCII: é"), "non-ASCII text is left to the regexp")
	assert.True(t, Prefilter{}.MayMatch("anything"))
	assert.True(t, NewPrefilter(`(`).MayMatch("x"), "an unreadable pattern rules nothing out")
}
