package ledger

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/troy-audit/troy/pkg/bus"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/troy-audit/troy/pipelines"
)

// CheckpointStream keeps the signed checkpoints.
const CheckpointStream = pipelines.StreamLedgerCheckpoints

// CheckpointSubject is where checkpoints are published.
const CheckpointSubject = "troy.checkpoints.ledger"

// Origin names troy's ledger log in its checkpoints.
func Origin(name string) string { return "troy-ledger/" + name }

// GenerateKey makes an Ed25519 signing key for checkpoints, in the note
// format (a private "PRIVATE+KEY+name+…" and a public "name+hash+…").
func GenerateKey(name string) (signer, verifier string, err error) {
	return note.GenerateKey(rand.Reader, name)
}

// LoadSigner reads a private key (the note format) from a file, or from
// the value itself when it starts with PRIVATE+KEY+.
func LoadSigner(keyOrFile string) (note.Signer, error) {
	s, _, err := LoadKeys(keyOrFile)
	return s, err
}

// LoadKeys reads a private key like LoadSigner and also returns the
// verifier of its public half (the checkpointer checks what it signed
// before with it).
func LoadKeys(keyOrFile string) (note.Signer, note.Verifier, error) {
	key := strings.TrimSpace(keyOrFile)
	if !strings.HasPrefix(key, "PRIVATE+KEY+") {
		b, err := os.ReadFile(keyOrFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ledger key: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	s, err := note.NewSigner(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger key: %w (make one with troy ledger keygen)", err)
	}
	// PRIVATE+KEY+<name>+<hash>+<base64 of 0x01 and the Ed25519 seed>
	parts := strings.SplitN(key, "+", 5) // the base64 may hold + too
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		return nil, nil, errors.New("ledger key: not an Ed25519 key (make one with troy ledger keygen)")
	}
	vkey, err := note.NewEd25519VerifierKey(s.Name(), ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey))
	if err != nil {
		return nil, nil, fmt.Errorf("ledger key: %w", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger key: %w", err)
	}
	return s, v, nil
}

// LoadVerifier reads a public key (the note format) from a file or value.
func LoadVerifier(keyOrFile string) (note.Verifier, error) {
	key := strings.TrimSpace(keyOrFile)
	if _, err := os.Stat(keyOrFile); err == nil {
		b, err := os.ReadFile(keyOrFile)
		if err != nil {
			return nil, fmt.Errorf("ledger public key: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	if strings.HasPrefix(key, "PRIVATE+KEY+") {
		return nil, errors.New("ledger public key: this is the private key: give the public one (what troy ledger keygen printed)")
	}
	v, err := note.NewVerifier(key)
	if err != nil {
		return nil, fmt.Errorf("ledger public key: %w", err)
	}
	return v, nil
}

var hasher = rfc6962.DefaultHasher

// Leaf is what the Merkle tree commits to for one stored entry: its
// subject and its bytes, so a record copied under another ledger's
// subject is not the entry that was checkpointed.
func Leaf(subject string, data []byte) []byte {
	leaf := make([]byte, 0, len(subject)+1+len(data))
	leaf = append(append(append(leaf, subject...), '\n'), data...)
	return leaf
}

// Leaves are the tree's leaves for stored entries.
func Leaves(stored []Stored) [][]byte {
	out := make([][]byte, len(stored))
	for i, st := range stored {
		out[i] = Leaf(st.Subject, st.Data)
	}
	return out
}

// Root is the RFC 6962 Merkle root over leaves (Leaf), in stream order.
func Root(entries [][]byte) ([]byte, error) {
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	for _, e := range entries {
		if err := r.Append(hasher.HashLeaf(e), nil); err != nil {
			return nil, err
		}
	}
	if len(entries) == 0 {
		return hasher.EmptyRoot(), nil
	}
	return r.GetRootHash(nil)
}

// Sign makes a signed checkpoint over entries (every entry of the LEDGER
// stream, in stream order).
func Sign(signer note.Signer, entries [][]byte) ([]byte, error) {
	root, err := Root(entries)
	if err != nil {
		return nil, err
	}
	cp := log.Checkpoint{Origin: Origin(signer.Name()), Size: uint64(len(entries)), Hash: root}
	return note.Sign(&note.Note{Text: string(cp.Marshal())}, signer)
}

// ReadAll returns every entry of the LEDGER stream in order, read through
// the stream's leader (a lagging replica would show a tail cut that is
// not there).
func ReadAll(ctx context.Context, js jetstream.JetStream) ([]Stored, error) {
	s, err := js.Stream(ctx, Stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []Stored
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err = bus.LeaderGet(ctx, js.Conn(), Stream, seq, "")
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, &Fault{Index: len(out), Kind: "tail_cut", Msg: fmt.Sprintf("stream sequence %d is missing", seq)}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Stored{StreamSeq: m.Sequence, Subject: m.Subject, Data: m.Data})
	}
	return out, nil
}

// PublishCheckpoint signs the whole stream as it stands and stores the
// checkpoint.
func PublishCheckpoint(ctx context.Context, js jetstream.JetStream, signer note.Signer) ([]byte, error) {
	stored, err := ReadAll(ctx, js)
	if err != nil {
		return nil, err
	}
	cp, err := Sign(signer, Leaves(stored))
	if err != nil {
		return nil, err
	}
	if _, err := js.Publish(ctx, CheckpointSubject, cp); err != nil {
		return nil, fmt.Errorf("ledger: publishing a checkpoint: %w", err)
	}
	return cp, nil
}

// LatestCheckpoint is the newest stored checkpoint.
func LatestCheckpoint(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	s, err := js.Stream(ctx, CheckpointStream)
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, CheckpointSubject)
	if err != nil {
		return nil, fmt.Errorf("no checkpoint yet: %w", err)
	}
	return m.Data, nil
}
