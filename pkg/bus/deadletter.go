package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DeadLetter sends a message that can never succeed (a Permanent error, or
// its last allowed delivery failing) to troy.dlq.<stage>.<run>, with the
// reason in its headers, and terminates it so it is never redelivered. The
// run token lets whoever submitted the run learn that an input will never
// produce a report.
func DeadLetter(js jetstream.JetStream, stage string, maxDeliver int, log zerolog.Logger) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m jetstream.Msg) error {
			var n uint64 = 1
			if md, mdErr := m.Metadata(); mdErr == nil {
				n = md.NumDelivered
			}
			var err error
			if maxDeliver > 0 && n > uint64(maxDeliver) {
				// the consumer allows one delivery more than the handler
				// gets: every earlier one ended without an answer
				err = unfinished(maxDeliver)
			} else if err = next(ctx, m); err == nil {
				return nil
			}
			if !IsPermanent(err) && (maxDeliver <= 0 || n < uint64(maxDeliver)) {
				return err
			}
			reason := err.Error()
			if !IsPermanent(err) {
				reason = fmt.Sprintf("gave up after %d deliveries: %s", n, reason)
			}
			dl := nats.NewMsg(DeadLetterSubject(stage, RunOf(m.Subject())))
			dl.Data = m.Data()
			for k, v := range m.Headers() {
				if k != HeaderMsgID { // the original id would dedupe unrelated dead letters
					dl.Header[k] = v
				}
			}
			dl.Header.Set(HeaderReason, reason)
			dl.Header.Set(HeaderOrigin, m.Subject())
			dl.Header.Set(HeaderStage, stage)
			dl.Header.Set(HeaderDeliveries, strconv.FormatUint(n, 10))
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, perr := js.PublishMsg(pctx, dl); perr != nil {
				// keep the message: losing it silently is worse than a retry
				return fmt.Errorf("dead-letter %s: %w (original error: %v)", m.Subject(), perr, err)
			}
			log.Warn().Str("stage", stage).Str("subject", m.Subject()).Str("reason", reason).Msg("message dead-lettered")
			_ = m.TermWithReason(truncateReason(reason))
			return errSettled
		}
	}
}

// DeadLetterSubject is troy.dlq.<stage>.<run>; a run token that is not
// valid becomes "invalid".
func DeadLetterSubject(stage, run string) string {
	if !ValidRun(run) {
		run = "invalid"
	}
	return Subject(StageDLQ, stage) + "." + run
}

func truncateReason(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// unfinished is the dead-letter reason of a message delivered once more
// than its handlers get: every earlier delivery ended without an answer.
func unfinished(maxDeliver int) error {
	return Permanentf("no handler finished it in %d deliveries (each crashed, hung past the ack wait or was killed): it may be too large or too costly to process", maxDeliver)
}
