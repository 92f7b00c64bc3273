package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Handler processes one message. Returning nil acks it; a Permanent error
// dead-letters it; any other error has it redelivered after a delay.
type Handler func(ctx context.Context, m jetstream.Msg) error

// Middleware wraps a handler.
type Middleware func(Handler) Handler

// Chain applies middleware so that the first one given runs outermost.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// permanentError marks input that can never succeed.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Permanentf is Permanent(fmt.Errorf(…)).
func Permanentf(format string, args ...any) error { return Permanent(fmt.Errorf(format, args...)) }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// errSettled tells the consumer loop that a middleware already acked or
// terminated the message.
var errSettled = errors.New("message settled")

// ConsumeConfig tunes a consumer loop.
type ConsumeConfig struct {
	Workers    int           // handlers running at once
	RetryDelay time.Duration // first redelivery delay, doubled per attempt
	Log        zerolog.Logger
}

// Consume pulls messages from a durable consumer and runs h on each with
// cfg.Workers goroutines, until ctx is cancelled. Messages already pulled
// finish before it returns; the rest stay on the stream for the next run.
func Consume(ctx context.Context, cons jetstream.Consumer, h Handler, cfg ConsumeConfig) error {
	workers := max(cfg.Workers, 1)
	delay := cfg.RetryDelay
	if delay == 0 {
		delay = 500 * time.Millisecond
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(2 * workers))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	// Handlers outlive ctx so that a message being processed at shutdown
	// finishes instead of being half done; each bus call has its own timeout.
	hctx := context.WithoutCancel(ctx)
	for range workers {
		wg.Go(func() {
			for m := range msgs {
				settle(hctx, m, h, delay, cfg.Log)
			}
		})
	}
	// Drain, not Stop: messages already pulled into the client buffer are
	// handled before returning, instead of sitting unacknowledged on the
	// server until their ack wait runs out.
	stop := context.AfterFunc(ctx, iter.Drain)
	defer stop()
	var loopErr error
	for {
		m, err := iter.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				loopErr = fmt.Errorf("consume: %w", err)
			}
			break
		}
		msgs <- m
	}
	close(msgs)
	wg.Wait()
	return loopErr
}

func settle(ctx context.Context, m jetstream.Msg, h Handler, delay time.Duration, log zerolog.Logger) {
	err := h(ctx, m)
	switch {
	case err == nil:
		if err := m.Ack(); err != nil {
			log.Warn().Err(err).Str("subject", m.Subject()).Msg("ack failed; the message will be redelivered")
		}
	case errors.Is(err, errSettled):
	default:
		n := uint64(1)
		if md, mdErr := m.Metadata(); mdErr == nil {
			n = md.NumDelivered
		}
		backoff := delay << min(n-1, 6)
		log.Warn().Err(err).Str("subject", m.Subject()).Uint64("delivery", n).Dur("retry_in", backoff).Msg("handler failed; retrying")
		_ = m.NakWithDelay(backoff)
	}
}
