// Package policystore keeps policy versions in a JetStream KV bucket: each
// version under its content hash, and for each policy id a pointer to its
// latest version. Services resolve "id", "sha256:…" or their default to a
// compiled engine, and see a newly pushed version without a restart.
package policystore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/policy"
)

// Bucket is the KV bucket of policy versions.
const Bucket = pipelines.BucketPolicies

// Key prefixes: versions by hash, latest version by policy id.
const (
	versionPrefix = "v."
	latestPrefix  = "id."
)

// ErrNotFound is returned for a hash or id the bucket does not hold.
var ErrNotFound = errors.New("policy not found")

// Store reads and writes policy versions, compiling each hash once.
type Store struct {
	kv jetstream.KeyValue
	nc *nats.Conn

	mu      sync.RWMutex
	engines map[string]*policy.Engine // by hash
	latest  map[string]string         // policy id -> hash, kept fresh by Watch
	watched bool
	def     string // reference used when a request names none
}

// Open binds to the policies bucket.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	// An API request the server drops (a bucket without a leader yet, after
	// a cluster restart) is never answered: each try is bounded, and tried
	// again until ctx ends.
	var kv jetstream.KeyValue
	var err error
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err = js.KeyValue(tctx, Bucket)
		cancel()
		err = bus.Refused(js.Conn(), err, "$JS.API.STREAM.INFO.KV_"+Bucket)
		if err == nil || errors.Is(err, jetstream.ErrBucketNotFound) || ctx.Err() != nil || bus.IsPermissionDenied(err) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("policy store: bucket %s: %w (was the topology provisioned?)", Bucket, err)
	}
	return &Store{kv: kv, nc: js.Conn(), engines: map[string]*policy.Engine{}, latest: map[string]string{}}, nil
}

func versionKey(hash string) string { return versionPrefix + bus.PolicyKey(hash) }

// KV keys allow few characters; any policy id maps to one.
func latestKey(id string) string {
	return latestPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// Put stores a policy version under its hash and returns the hash. It does
// not change which version is the latest of its id (Push does).
func (s *Store) Put(ctx context.Context, p *policy.Policy) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("policy store: %w", err)
	}
	h := p.Hash()
	if _, err := s.kv.Put(ctx, versionKey(h), b); err != nil {
		return "", fmt.Errorf("policy store: put %s: %w", h, bus.Refused(s.nc, err, "$KV."+Bucket+"."))
	}
	return h, nil
}

// Push stores a version and makes it the latest of its policy id: services
// resolving the id use it from their next check or message on.
func (s *Store) Push(ctx context.Context, p *policy.Policy) (string, error) {
	h, err := s.Put(ctx, p)
	if err != nil {
		return "", err
	}
	if _, err := s.kv.PutString(ctx, latestKey(p.PolicyID), h); err != nil {
		return "", fmt.Errorf("policy store: point %s at %s: %w", p.PolicyID, h, bus.Refused(s.nc, err, "$KV."+Bucket+"."))
	}
	s.mu.Lock()
	s.latest[p.PolicyID] = h
	s.mu.Unlock()
	return h, nil
}

// Ensure makes the store hold p's version, writing only what is missing:
// with latest, also as the latest version of its policy id. A user that
// may only read the store (only the operator writes policies) passes when
// an operator has pushed this version, and is told how to when not.
func (s *Store) Ensure(ctx context.Context, p *policy.Policy, latest bool) (string, error) {
	h := p.Hash()
	_, err := s.ByHash(ctx, h)
	missing := err != nil
	if !missing && latest {
		var cur jetstream.KeyValueEntry
		cur, err = s.kv.Get(ctx, latestKey(p.PolicyID))
		missing = err != nil || string(cur.Value()) != h
	}
	if !missing {
		return h, nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, jetstream.ErrKeyNotFound) || err == nil {
		// a write the user may not make is never answered: bounded
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if latest {
			_, err = s.Push(wctx, p)
		} else {
			_, err = s.Put(wctx, p)
		}
		cancel()
	}
	if bus.IsPermissionDenied(err) {
		what := "is not in the store"
		if latest {
			what = "is not the latest of policy " + strconv.Quote(p.PolicyID) + " in the store"
		}
		return "", fmt.Errorf("policy %s %s, and this NATS user may not write policies: an operator pushes it first (troy policies push FILE, or troy provision --policy FILE): %w", h, what, err)
	}
	if err != nil {
		return "", err
	}
	return h, nil
}

// SetDefault sets the reference (id or hash) used when none is given.
func (s *Store) SetDefault(ref string) {
	s.mu.Lock()
	s.def = ref
	s.mu.Unlock()
}

// Watch keeps the id -> latest version map fresh from the bucket until ctx
// ends, so a resolve by id costs no round trip. It returns once the current
// pointers are loaded.
func (s *Store) Watch(ctx context.Context) error {
	w, err := s.kv.Watch(ctx, latestPrefix+">")
	if err != nil {
		return fmt.Errorf("policy store: watch: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil { // the current values are in
				s.mu.Lock()
				s.watched = true
				s.mu.Unlock()
				close(ready)
				continue
			}
			id, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(e.Key(), latestPrefix))
			if err != nil {
				continue
			}
			s.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				s.latest[string(id)] = string(e.Value())
			} else {
				delete(s.latest, string(id))
			}
			s.mu.Unlock()
		}
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Engine resolves a reference: "sha256:…" is that version, any other string
// is the latest version of that policy id, and "" is the default.
func (s *Store) Engine(ctx context.Context, ref string) (*policy.Engine, error) {
	s.mu.RLock()
	if ref == "" {
		ref = s.def
	}
	hash, known := s.latest[ref]
	watched := s.watched
	s.mu.RUnlock()
	switch {
	case ref == "":
		return nil, fmt.Errorf("%w: no policy named and no default set (troy serve --policy)", ErrNotFound)
	case strings.HasPrefix(ref, "sha256:"):
		return s.ByHash(ctx, ref)
	case !known && !watched:
		e, err := s.kv.Get(ctx, latestKey(ref))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: troy's store has no policy with id %q: push it first (troy policies push FILE or TEMPLATE)", ErrNotFound, ref)
		}
		if err != nil {
			return nil, fmt.Errorf("policy store: %w", err)
		}
		hash = string(e.Value())
	case !known:
		return nil, fmt.Errorf("%w: troy's store has no policy with id %q: push it first (troy policies push FILE or TEMPLATE)", ErrNotFound, ref)
	}
	return s.ByHash(ctx, hash)
}

// ByHash returns the compiled policy of a hash. A stored policy that no
// longer compiles or no longer matches its hash is an error, never a skip.
func (s *Store) ByHash(ctx context.Context, hash string) (*policy.Engine, error) {
	s.mu.RLock()
	e, ok := s.engines[hash]
	s.mu.RUnlock()
	if ok {
		return e, nil
	}
	entry, err := s.kv.Get(ctx, versionKey(hash))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: troy's store has no policy version %s: push that file first (troy policies push FILE or TEMPLATE)", ErrNotFound, hash)
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

// Add registers an already-compiled engine under its hash.
func (s *Store) Add(e *policy.Engine) {
	s.mu.Lock()
	s.engines[e.Hash()] = e
	s.mu.Unlock()
}
