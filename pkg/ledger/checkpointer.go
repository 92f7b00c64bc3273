package ledger

import (
	"context"
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
// first (and only when the log grew). A hole in the stream stops signing:
// a checkpoint never vouches for a log with an entry missing.
type Checkpointer struct {
	JS       jetstream.JetStream
	Signer   note.Signer
	Every    uint64        // entries between checkpoints (1,000)
	Interval time.Duration // longest time between checkpoints of a growing log (1 m)
	Log      zerolog.Logger
	// Signed, when set, is told each checkpoint's size (metrics).
	Signed func(size uint64)

	mu     sync.Mutex
	tree   *compact.Range
	signed uint64 // the size of the last checkpoint signed
	fault  error
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
			}
		}
		if c.fault != nil {
			c.Log.Error().Err(c.fault).Msg("checkpointer: the ledger has a hole; no more checkpoints are signed")
			return
		}
		if c.tree.End()-c.signed >= c.Every {
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

// checkpoint signs and stores the tree as it stands, when it grew past
// the last size signed.
func (c *Checkpointer) checkpoint(ctx context.Context) error {
	c.mu.Lock()
	if c.fault != nil {
		c.mu.Unlock()
		return c.fault
	}
	size := c.tree.End()
	if size == c.signed {
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
