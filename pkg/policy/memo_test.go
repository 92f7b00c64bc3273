package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/detect"
)

func TestDetectorMemoGivesTheSameFindingsAndStaysBounded(t *testing.T) {
	var calls int
	find := func(s string) []detect.Finding { calls++; return detect.PII(s) }
	d := detector(find)
	first, err := d("mail dana@example.com")
	require.NoError(t, err)
	again, err := d("mail dana@example.com")
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, 1, calls, "the second scan is remembered")

	long := strings.Repeat("x", memoMaxText+1)
	_, _ = d(long)
	_, _ = d(long)
	assert.Equal(t, 3, calls, "long texts are not remembered")

	var m detectorMemo
	for i := 0; i < 2*memoMaxBytes/memoMaxText; i++ {
		m.put(strings.Repeat("y", memoMaxText-10)+string(rune('a'+i%26))+strings.Repeat("z", i%7)+string(rune(i)), nil)
		assert.LessOrEqual(t, m.n, memoMaxBytes)
	}
}
