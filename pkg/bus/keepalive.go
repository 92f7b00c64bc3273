package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeepAlive tells the server a message is still being worked on (InProgress)
// every interval while the handler runs, so a long handler (an LLM call)
// needs no huge ack wait and a crashed one is still redelivered soon.
func KeepAlive(interval time.Duration) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			done := make(chan struct{})
			go func() {
				t := time.NewTicker(interval)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-t.C:
						_ = m.InProgress()
					}
				}
			}()
			defer close(done)
			return next(ctx, m)
		}
	}
}
