package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// A stream followed by direct gets alone: in batches, by subject, from a
// sequence or from a time, and nothing more once the end is reached.
func TestDirectReadFollowsAStream(t *testing.T) {
	s := bustest.RunServer(t)
	ctx := context.Background()
	_, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, AllowDirect: true})
	require.NoError(t, err)
	for i := range 10 {
		_, err := s.JS.Publish(ctx, fmt.Sprintf("f.%s.%d", []string{"a", "b"}[i%2], i), fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
	}
	mid := time.Now()
	time.Sleep(5 * time.Millisecond)
	for i := 10; i < 12; i++ {
		_, err := s.JS.Publish(ctx, fmt.Sprintf("f.a.%d", i), fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
	}

	var got []string
	from := bus.DirectFrom{Seq: 1}
	for range 10 {
		batch, next, err := bus.DirectRead(ctx, s.NC, "F", "f.a.>", from, 2)
		require.NoError(t, err)
		if len(batch) == 0 {
			break
		}
		assert.LessOrEqual(t, len(batch), 2, "batches are bounded")
		for _, m := range batch {
			got = append(got, string(m.Data))
			assert.False(t, m.Time.IsZero())
		}
		from = bus.DirectFrom{Seq: next}
	}
	assert.Equal(t, []string{"0", "2", "4", "6", "8", "10", "11"}, got, "only the filter's messages, in order")

	batch, _, err := bus.DirectRead(ctx, s.NC, "F", "f.>", bus.DirectFrom{Since: mid}, 100)
	require.NoError(t, err)
	require.Len(t, batch, 2, "from a time: what was stored after it")
	assert.Equal(t, "f.a.10", batch[0].Subject)
	assert.Equal(t, uint64(11), batch[0].Seq)

	batch, next, err := bus.DirectRead(ctx, s.NC, "F", "f.>", bus.DirectFrom{Seq: 13}, 100)
	require.NoError(t, err)
	assert.Empty(t, batch, "past the end: nothing, and no error")
	assert.Equal(t, uint64(13), next, "read again from the same place")

	_, _, err = bus.DirectRead(ctx, s.NC, "NOPE", "f.>", bus.DirectFrom{Seq: 1}, 1)
	assert.Error(t, err, "a stream that is not there")
}

func TestSubjectMatches(t *testing.T) {
	assert.True(t, bus.SubjectMatches("troy.violations.*.r", "troy.violations.high.r"))
	assert.False(t, bus.SubjectMatches("troy.violations.*.r", "troy.violations.high.s"))
	assert.True(t, bus.SubjectMatches("troy.>", "troy.a.b"))
	assert.False(t, bus.SubjectMatches("troy.>", "troy"))
	assert.False(t, bus.SubjectMatches("troy.*", "troy.a.b"))
}
