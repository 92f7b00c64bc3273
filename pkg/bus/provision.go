package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
)

// Provision creates or updates every stream, consumer and bucket of the
// topology. It is idempotent: every process runs it at start.
func Provision(ctx context.Context, js jetstream.JetStream, topo *pipelines.Topology) error {
	for _, s := range topo.Streams {
		cfg, err := streamConfig(s)
		if err != nil {
			return err
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("provision stream %s: %w", s.Name, err)
		}
	}
	d := topo.ConsumerDefaults
	for _, c := range topo.Consumers {
		cfg := jetstream.ConsumerConfig{
			Durable:       c.Name,
			Description:   "troy " + c.Name + " service",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       d.AckWait.Duration,
			MaxDeliver:    d.MaxDeliver,
			MaxAckPending: d.MaxAckPending,
		}
		if len(c.FilterSubjects) == 1 {
			cfg.FilterSubject = c.FilterSubjects[0]
		} else {
			cfg.FilterSubjects = c.FilterSubjects
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, cfg); err != nil {
			return fmt.Errorf("provision consumer %s on %s: %w", c.Name, c.Stream, err)
		}
	}
	for _, b := range topo.Buckets {
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: b.Name, Description: b.Description, TTL: b.TTL.Duration,
		}); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Name, err)
		}
	}
	return nil
}

func streamConfig(s pipelines.Stream) (jetstream.StreamConfig, error) {
	cfg := jetstream.StreamConfig{
		Name:        s.Name,
		Description: s.Description,
		Subjects:    s.Subjects,
		Storage:     jetstream.FileStorage,
		MaxAge:      s.MaxAge.Duration,
		Duplicates:  s.DuplicateWindow.Duration,
	}
	switch s.Retention {
	case "limits", "":
		cfg.Retention = jetstream.LimitsPolicy
	case "interest":
		cfg.Retention = jetstream.InterestPolicy
	case "workqueue":
		cfg.Retention = jetstream.WorkQueuePolicy
	default:
		return cfg, fmt.Errorf("stream %s: retention %q is not one of limits, interest, workqueue", s.Name, s.Retention)
	}
	return cfg, nil
}
