// Package policystore keeps policy versions in a JetStream KV bucket, keyed
// by content hash, and hands out compiled engines.
package policystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/policy"
)

// Bucket is the KV bucket of policy versions.
const Bucket = "troy_policies"

// ErrNotFound is returned for a hash the bucket does not hold.
var ErrNotFound = errors.New("policy version not found")

// Store reads and writes policy versions, compiling each hash once.
type Store struct {
	kv jetstream.KeyValue

	mu      sync.Mutex
	engines map[string]*policy.Engine
}

// Open binds to the policies bucket.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("policy store: bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv, engines: map[string]*policy.Engine{}}, nil
}

// Put stores a policy version under its hash and returns the hash.
func (s *Store) Put(ctx context.Context, p *policy.Policy) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("policy store: %w", err)
	}
	h := p.Hash()
	if _, err := s.kv.Put(ctx, bus.PolicyKey(h), b); err != nil {
		return "", fmt.Errorf("policy store: put %s: %w", h, err)
	}
	return h, nil
}

// Engine returns the compiled policy of a hash. A stored policy that no longer
// compiles or no longer matches its hash is an error, never a silent skip.
func (s *Store) Engine(ctx context.Context, hash string) (*policy.Engine, error) {
	s.mu.Lock()
	e, ok := s.engines[hash]
	s.mu.Unlock()
	if ok {
		return e, nil
	}
	entry, err := s.kv.Get(ctx, bus.PolicyKey(hash))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s is not in bucket %s (the submitter stores it before publishing traces)", ErrNotFound, hash, Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("policy store: get %s: %w", hash, err)
	}
	p, err := policy.Parse(entry.Value())
	if err != nil {
		return nil, fmt.Errorf("policy store: %s: %w", hash, err)
	}
	if p.Hash() != hash {
		return nil, fmt.Errorf("policy store: entry %s hashes to %s: the bucket was edited by hand", hash, p.Hash())
	}
	e, err = policy.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("policy store: %s: %w", hash, err)
	}
	s.mu.Lock()
	s.engines[hash] = e
	s.mu.Unlock()
	return e, nil
}

// Add registers an already-compiled engine (a service's default policy).
func (s *Store) Add(e *policy.Engine) {
	s.mu.Lock()
	s.engines[e.Hash()] = e
	s.mu.Unlock()
}
