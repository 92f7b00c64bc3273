package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pipelines"
)

// Deps are what every service is built from.
type Deps struct {
	JS       jetstream.JetStream
	Topology *pipelines.Topology
	Log      zerolog.Logger
	Metrics  *Metrics
}

// NewDeps bundles a JetStream handle with the shipped topology, a logger and
// metrics registered on reg.
func NewDeps(js jetstream.JetStream, log zerolog.Logger, reg prometheus.Registerer) (Deps, error) {
	topo, err := pipelines.Load()
	if err != nil {
		return Deps{}, err
	}
	return Deps{JS: js, Topology: topo, Log: log, Metrics: NewMetrics(reg)}, nil
}

// MaxSubjectBytes bounds the subjects troy publishes on: a line longer than
// the server's max_control_line (4 KiB by default) makes it close the
// connection, and every service on it stops.
const MaxSubjectBytes = 1024

// checkSubject refuses a subject over MaxSubjectBytes: the server would
// close the whole connection over it.
func checkSubject(subject string) error {
	if len(subject) > MaxSubjectBytes {
		return Permanentf("subject of %d bytes (%.40s…), over the %d-byte limit", len(subject), subject, MaxSubjectBytes)
	}
	return nil
}

// Out is one message a stage publishes.
type Out struct {
	Subject string
	Data    []byte
	Header  nats.Header
	MsgID   string
}

// Publish sends a message and waits for JetStream to store it.
func Publish(ctx context.Context, js jetstream.JetStream, o Out) error {
	if err := checkSubject(o.Subject); err != nil {
		return err
	}
	m := nats.NewMsg(o.Subject)
	m.Data = o.Data
	for k, v := range o.Header {
		m.Header[k] = v
	}
	if o.MsgID != "" {
		m.Header.Set(HeaderMsgID, o.MsgID)
	}
	// With a message id the server stores a message once however often it
	// is sent, so a publish that timed out or found no stream leader (a
	// cluster electing one) is sent again, for up to 30 s.
	start := time.Now()
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if o.MsgID == "" || !transient(err) || ctx.Err() != nil || time.Since(start) > 30*time.Second {
			return fmt.Errorf("publish %s: %w", o.Subject, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", o.Subject, err)
		case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// transient reports whether a publish error may go away by itself: no
// answer in time, or no stream leader for the moment. A full store is not
// waited out: the sender is told at once.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503 && apiErr.ErrorCode != ErrCodeInsufficientResources
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// ErrCodeInsufficientResources is JetStream's "insufficient resources"
// (the store is full).
const ErrCodeInsufficientResources jetstream.ErrorCode = 10023
