package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// BatchConfig tunes ConsumeBatches.
type BatchConfig struct {
	Size       int           // most messages per batch
	Wait       time.Duration // longest wait for a batch to fill
	MaxBackoff time.Duration
	Log        zerolog.Logger
}

// ConsumeBatches pulls batches from a durable consumer and hands each to
// send; when send succeeds every message is acked. When it fails the batch
// is kept (InProgress), retried with backoff until it goes through, so a
// destination that is down loses nothing: the consumer simply waits. On
// shutdown an unsent batch is nak'ed for the next run.
func ConsumeBatches(ctx context.Context, cons jetstream.Consumer, cfg BatchConfig, send func(context.Context, []jetstream.Msg) error) error {
	if cfg.Size < 1 {
		cfg.Size = 100
	}
	if cfg.Wait <= 0 {
		cfg.Wait = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	for ctx.Err() == nil {
		b, err := cons.Fetch(cfg.Size, jetstream.FetchMaxWait(cfg.Wait))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			cfg.Log.Warn().Err(err).Msg("fetch failed; retrying")
			sleepFor(ctx, time.Second)
			continue
		}
		var msgs []jetstream.Msg
		for m := range b.Messages() {
			msgs = append(msgs, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && len(msgs) == 0 && ctx.Err() == nil {
			cfg.Log.Debug().Err(err).Msg("fetch ended")
		}
		if len(msgs) == 0 {
			continue
		}
		if err := deliver(ctx, msgs, cfg, send); err != nil {
			for _, m := range msgs {
				_ = m.Nak()
			}
			return nil // only on shutdown
		}
		for _, m := range msgs {
			_ = m.Ack()
		}
	}
	return nil
}

// deliver retries send until it succeeds or ctx ends, keeping the messages
// alive meanwhile.
func deliver(ctx context.Context, msgs []jetstream.Msg, cfg BatchConfig, send func(context.Context, []jetstream.Msg) error) error {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := send(ctx, msgs)
		if err == nil {
			return nil
		}
		cfg.Log.Warn().Err(err).Int("attempt", attempt).Int("messages", len(msgs)).Dur("retry_in", wait).
			Msg("destination refused the batch; keeping it and retrying")
		if !holdFor(ctx, msgs, wait) {
			return fmt.Errorf("shutdown with an unsent batch: %w", ctx.Err())
		}
		wait = min(wait*2, cfg.MaxBackoff)
	}
}

// holdFor waits d, telling the server every few seconds that the messages
// are still being worked on, so none is redelivered behind our back.
func holdFor(ctx context.Context, msgs []jetstream.Msg, d time.Duration) bool {
	const every = 3 * time.Second
	for d > 0 {
		for _, m := range msgs {
			_ = m.InProgress()
		}
		step := min(d, every)
		if !sleepFor(ctx, step) {
			return false
		}
		d -= step
	}
	return true
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
