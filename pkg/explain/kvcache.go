package explain

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
)

// CacheBucket keeps explanations by content key, so auditing the same trace
// again, or resuming one after a crash, pays for no call twice.
const CacheBucket = pipelines.BucketExplanations

// KVCache is a Cache in a JetStream KV bucket.
type KVCache struct{ kv jetstream.KeyValue }

// OpenKVCache binds to the explanations bucket.
func OpenKVCache(ctx context.Context, js jetstream.JetStream) (*KVCache, error) {
	kv, err := js.KeyValue(ctx, CacheBucket)
	if err != nil {
		return nil, fmt.Errorf("explanation cache: bucket %s: %w (was the topology provisioned?)", CacheBucket, err)
	}
	return &KVCache{kv: kv}, nil
}

// Get implements Cache.
func (c *KVCache) Get(ctx context.Context, key string) ([]byte, bool, error) {
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return e.Value(), true, nil
}

// Put implements Cache.
func (c *KVCache) Put(ctx context.Context, key string, value []byte) error {
	_, err := c.kv.Put(ctx, key, value)
	return err
}
