package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"golang.org/x/mod/sumdb/note"
)

// Checkpointer follows the LEDGER stream from its first entry, keeps the
// RFC 6962 Merkle tree over every entry, and signs a checkpoint of it onto
// LEDGER_CHECKPOINTS every Every entries or Interval, whichever comes
// first (and only when the log grew). It signs nothing until it has read
// the log as it stood at start, and goes on from the newest checkpoint
// its key signed, whose root the log must still have. A hole in the
// stream, or a log that no longer matches that checkpoint, stops signing:
// a checkpoint never vouches for a log with an entry missing or changed.
type Checkpointer struct {
	JS       jetstream.JetStream
	Signer   note.Signer
	Verifier note.Verifier // the signer's public half (LoadKeys)
	Every    uint64        // entries between checkpoints (1,000)
	Interval time.Duration // longest time between checkpoints of a growing log (1 m)
	Log      zerolog.Logger
	// Signed, when set, is told each checkpoint's size (metrics).
	Signed func(size uint64)

	mu       sync.Mutex
	tree     *compact.Range
	signed   uint64 // the size of the last checkpoint signed
	prevRoot []byte // its root, when it was signed before this process
	startEnd uint64 // the log's size at start: nothing is signed before reading it
	fault    error
}

// Size is how many entries the checkpointer has read.
func (c *Checkpointer) Size() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tree == nil {
		return 0
	}
	return c.tree.End()
}

// Fault is why the checkpointer stopped signing, nil while it signs.
func (c *Checkpointer) Fault() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fault
}

// Run follows the stream until ctx ends.
func (c *Checkpointer) Run(ctx context.Context) error {
	if c.Every == 0 {
		c.Every = 1000
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	rf := compact.RangeFactory{Hash: hasher.HashChildren}
	c.mu.Lock()
	c.tree = rf.NewEmptyRange(0)
	c.mu.Unlock()
	s, err := c.JS.Stream(ctx, Stream)
	if err != nil {
		return fmt.Errorf("checkpointer: stream %s: %w", Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("checkpointer: stream %s: %w", Stream, err)
	}
	c.mu.Lock()
	c.startEnd = info.State.LastSeq
	c.mu.Unlock()
	if err := c.resume(ctx); err != nil {
		return err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("checkpointer: follow %s: %w", Stream, err)
	}
	due := make(chan struct{}, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.fault != nil {
			return
		}
		switch {
		case err != nil:
			c.fault = fmt.Errorf("entry %d: %w", c.tree.End()+1, err)
		case meta.Sequence.Stream != c.tree.End()+1:
			c.fault = fmt.Errorf("stream sequence %d follows %d: entries are missing", meta.Sequence.Stream, c.tree.End())
		default:
			if err := c.tree.Append(hasher.HashLeaf(Leaf(m.Subject(), m.Data())), nil); err != nil {
				c.fault = err
			} else if c.prevRoot != nil && c.tree.End() == c.signed {
				if root, err := c.tree.GetRootHash(nil); err != nil || !bytes.Equal(root, c.prevRoot) {
					c.fault = fmt.Errorf("the first %d entries no longer hash to the root this key signed for them: the log was changed", c.signed)
				}
			}
		}
		if c.fault != nil {
			c.Log.Error().Err(c.fault).Msg("checkpointer: the ledger has a hole; no more checkpoints are signed")
			return
		}
		if c.tree.End() >= c.startEnd && c.tree.End()-c.signed >= c.Every {
			select {
			case due <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("checkpointer: follow %s: %w", Stream, err)
	}
	defer cc.Stop()
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-due:
		}
		if err := c.checkpoint(ctx); err != nil {
			c.Log.Warn().Err(err).Msg("checkpointer: no checkpoint this time")
		}
	}
}

// resume finds the newest checkpoint this key signed: signing goes on
// from its size once the log has been read that far and still has its
// root. Checkpoints another key signed (or junk) are passed over.
func (c *Checkpointer) resume(ctx context.Context) error {
	if c.Verifier == nil {
		return nil
	}
	s, err := c.JS.Stream(ctx, CheckpointStream)
	if err != nil {
		return fmt.Errorf("checkpointer: stream %s: %w", CheckpointStream, err)
	}
	last := s.CachedInfo().State.LastSeq
	for seq, tries := last, 0; seq > 0 && tries < 1000; seq, tries = seq-1, tries+1 {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("checkpointer: reading checkpoint %d: %w", seq, err)
		}
		cp, _, _, err := log.ParseCheckpoint(m.Data, Origin(c.Verifier.Name()), c.Verifier)
		if err != nil {
			continue
		}
		c.mu.Lock()
		c.signed, c.prevRoot = cp.Size, cp.Hash
		c.mu.Unlock()
		c.Log.Info().Uint64("size", cp.Size).Msg("checkpointer: going on from the newest checkpoint this key signed")
		return nil
	}
	return nil
}

// checkpoint signs and stores the tree as it stands, when it grew past
// the last size signed.
func (c *Checkpointer) checkpoint(ctx context.Context) error {
	c.mu.Lock()
	if c.fault != nil {
		c.mu.Unlock()
		return c.fault
	}
	size := c.tree.End()
	if c.prevRoot != nil && size >= c.startEnd && size < c.signed {
		c.fault = fmt.Errorf("the log has %d entries; this key signed %d before: entries were removed", size, c.signed)
		c.Log.Error().Err(c.fault).Msg("checkpointer: the ledger was cut; no more checkpoints are signed")
		c.mu.Unlock()
		return c.fault
	}
	if size <= c.signed || size < c.startEnd { // nothing new, or still reading the log as it was
		c.mu.Unlock()
		return nil
	}
	root, err := c.tree.GetRootHash(nil)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	cp := log.Checkpoint{Origin: Origin(c.Signer.Name()), Size: size, Hash: root}
	signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, c.Signer)
	if err != nil {
		return err
	}
	m := nats.NewMsg(CheckpointSubject)
	m.Data = signed
	m.Header.Set(jetstream.MsgIDHeader, "checkpoint-"+strconv.FormatUint(size, 10)) // two checkpointers, one checkpoint
	if _, err := c.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish the checkpoint of %d entries: %w", size, err)
	}
	c.mu.Lock()
	c.signed = size
	c.mu.Unlock()
	c.Log.Info().Uint64("size", size).Msg("checkpointer: signed a checkpoint")
	if c.Signed != nil {
		c.Signed(size)
	}
	return nil
}
