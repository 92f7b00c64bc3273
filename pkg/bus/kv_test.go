package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
)

// Concurrent read-modify-writes on one key must all land: the counter ends
// at exactly the number of increments.
func TestUpdateKVConcurrentIncrementsAllLand(t *testing.T) {
	s := bustest.RunServer(t)
	ctx := context.Background()
	kv, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "counters"})
	require.NoError(t, err)

	incr := func(cur []byte) ([]byte, bus.KVChange, error) {
		n := 0
		if cur != nil {
			var err error
			if n, err = strconv.Atoi(string(cur)); err != nil {
				return nil, bus.KVKeep, err
			}
		}
		return []byte(strconv.Itoa(n + 1)), bus.KVWrite, nil
	}
	const workers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				errs <- bus.UpdateKV(ctx, kv, "n", incr)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	entry, err := kv.Get(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(workers*each), string(entry.Value()))
}

func TestUpdateKVKeepPurgeAndErrors(t *testing.T) {
	s := bustest.RunServer(t)
	ctx := context.Background()
	kv, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	require.NoError(t, err)

	// Keep on an absent key writes nothing.
	require.NoError(t, bus.UpdateKV(ctx, kv, "k", func(cur []byte) ([]byte, bus.KVChange, error) {
		assert.Nil(t, cur)
		return []byte("x"), bus.KVKeep, nil
	}))
	_, err = kv.Get(ctx, "k")
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound)

	_, err = kv.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	boom := errors.New("boom")
	err = bus.UpdateKV(ctx, kv, "k", func(cur []byte) ([]byte, bus.KVChange, error) {
		assert.Equal(t, "v", string(cur))
		return nil, bus.KVWrite, boom
	})
	assert.ErrorIs(t, err, boom, "fn's error is returned as is")

	require.NoError(t, bus.UpdateKV(ctx, kv, "k", func([]byte) ([]byte, bus.KVChange, error) {
		return nil, bus.KVPurge, nil
	}))
	_, err = kv.Get(ctx, "k")
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound)
}
