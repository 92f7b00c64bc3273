package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Recover turns a panic in a handler into a Permanent error, so one poisoned
// message is dead-lettered instead of crashing the service.
func Recover() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = Permanentf("handler panicked: %v", r)
				}
			}()
			return next(ctx, m)
		}
	}
}
