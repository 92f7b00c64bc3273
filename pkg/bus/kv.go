package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// KVChange is what an UpdateKV function decides to do with the entry.
type KVChange int

// Changes.
const (
	KVKeep  KVChange = iota // leave the entry as it is
	KVWrite                 // store the returned value
	KVPurge                 // remove the entry
)

// maxKVAttempts bounds retries when other writers keep winning.
const maxKVAttempts = 20

// UpdateKV reads a key, lets fn decide its new value (cur is nil when the
// key is absent), and writes it under a revision check; when another writer
// changed the key in between, it reads again and retries. So concurrent
// read-modify-writes, in one process or many, never lose an update.
func UpdateKV(ctx context.Context, kv jetstream.KeyValue, key string, fn func(cur []byte) ([]byte, KVChange, error)) error {
	for range maxKVAttempts {
		var cur []byte
		var rev uint64
		entry, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			cur, rev = entry.Value(), entry.Revision()
		}
		next, change, err := fn(cur)
		if err != nil {
			return err
		}
		switch change {
		case KVKeep:
			return nil
		case KVPurge:
			return kv.Purge(ctx, key)
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, next)
		} else {
			_, err = kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !wrongRevision(err) {
			return err
		}
	}
	return fmt.Errorf("key %s: too many concurrent updates", key)
}

func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
