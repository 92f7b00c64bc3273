package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
)

// Provision creates or updates every stream, consumer and bucket of the
// topology. It is idempotent: every process runs it at start.
func Provision(ctx context.Context, js jetstream.JetStream, topo *pipelines.Topology) error {
	for _, c := range topo.RetiredConsumers {
		if err := js.DeleteConsumer(ctx, c.Stream, c.Name); err != nil &&
			!errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("provision: remove retired consumer %s on %s: %w", c.Name, c.Stream, err)
		}
	}
	for _, s := range topo.Streams {
		if err := provisionStream(ctx, js, s, topo.Replicas); err != nil {
			return err
		}
	}
	d := topo.ConsumerDefaults
	for _, c := range topo.Durables() {
		cfg := jetstream.ConsumerConfig{
			Durable:     c.Name,
			Description: "troy " + c.Name + " service",
			AckPolicy:   jetstream.AckExplicitPolicy,
			AckWait:     d.AckWait.Duration,
			// one delivery more than the handlers try: the DeadLetter
			// middleware takes that last one to the dead-letter stream,
			// so a message whose handler crashed or hung on every try is
			// not dropped silently by the server
			MaxDeliver:    serverMaxDeliver(d.MaxDeliver),
			MaxAckPending: d.MaxAckPending,
			Replicas:      0, // consumers follow their stream
		}
		if c.MaxDeliver != 0 {
			cfg.MaxDeliver = serverMaxDeliver(c.MaxDeliver)
		}
		if c.MaxAckPending != 0 {
			cfg.MaxAckPending = c.MaxAckPending
		}
		if c.Pinned {
			cfg.PriorityPolicy = jetstream.PriorityPolicyPinned
			cfg.PriorityGroups = []string{pipelines.PriorityGroup}
			cfg.PinnedTTL = PinnedTTL
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
			Bucket: b.Name, Description: b.Description, TTL: b.TTL.Duration, LimitMarkerTTL: b.MarkerTTL.Duration,
			Replicas: replicas(ctx, js, "KV_"+b.Name, topo.Replicas),
		}); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Name, err)
		}
	}
	return nil
}

// CheckTopology confirms, with read-only calls, that every stream, durable
// consumer and bucket of the topology is there: what a process whose user
// may not provision (troy provision is an operator's) does at start.
func CheckTopology(ctx context.Context, js jetstream.JetStream, topo *pipelines.Topology) error {
	missing := func(what string, err error) error {
		return fmt.Errorf("the topology is not in place: %s: %w (an operator runs troy provision; a request that times out may be one this user is not allowed)", what, err)
	}
	for _, s := range topo.Streams {
		if _, err := js.Stream(ctx, s.Name); err != nil {
			return missing("stream "+s.Name, err)
		}
	}
	for _, c := range topo.Durables() {
		if _, err := js.Consumer(ctx, c.Stream, c.Name); err != nil {
			return missing("consumer "+c.Stream+"/"+c.Name, err)
		}
	}
	for _, b := range topo.Buckets {
		if _, err := js.KeyValue(ctx, b.Name); err != nil {
			return missing("bucket "+b.Name, err)
		}
	}
	return nil
}

// provisionStream creates a stream, or updates it when its configuration
// differs, and only then: a stream already as it should be is not touched,
// so services can run as users who may not change sealed streams (the
// ledger; deploy/nats/auth.conf).
func provisionStream(ctx context.Context, js jetstream.JetStream, s pipelines.Stream, wantReplicas int) error {
	cfg, err := streamConfig(s)
	if err != nil {
		return err
	}
	existing, err := js.Stream(ctx, s.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		cfg.Replicas = max(wantReplicas, 1)
		if _, err = js.CreateStream(ctx, cfg); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = js.CreateOrUpdateStream(ctx, cfg) // created meanwhile, otherwise
		}
	case err != nil:
	default:
		cur := existing.CachedInfo().Config
		cfg.Replicas = wantReplicas
		if cfg.Replicas <= 0 { // keep what the cluster has
			cfg.Replicas = max(cur.Replicas, 1)
		}
		if sameStream(cur, cfg) {
			return nil
		}
		_, err = js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		if s.DenyDelete && s.DenyPurge {
			return fmt.Errorf("provision stream %s: %w (a sealed stream: where services may not change it, an operator applies the change)", s.Name, err)
		}
		return fmt.Errorf("provision stream %s: %w", s.Name, err)
	}
	return nil
}

// sameStream reports whether the stream has every setting troy provisions.
func sameStream(cur, want jetstream.StreamConfig) bool {
	return cur.Description == want.Description && slices.Equal(cur.Subjects, want.Subjects) && cur.Retention == want.Retention &&
		cur.Storage == want.Storage && cur.MaxAge == want.MaxAge && cur.Duplicates == want.Duplicates &&
		cur.AllowDirect == want.AllowDirect && cur.DenyDelete == want.DenyDelete && cur.DenyPurge == want.DenyPurge &&
		cur.AllowAtomicPublish == want.AllowAtomicPublish && cur.Replicas == want.Replicas
}

// PinnedTTL is how long a pinned consumer waits for its client's next pull
// before it pins another: how long a dead streamer's partitions wait.
const PinnedTTL = 5 * time.Second

// replicas is the replica count to provision a stream with: the one asked
// for, or else what the stream has now (so a client that does not know the
// cluster's layout never shrinks it), or 1 for a new stream.
func replicas(ctx context.Context, js jetstream.JetStream, stream string, want int) int {
	if want > 0 {
		return want
	}
	if s, err := js.Stream(ctx, stream); err == nil {
		if info, err := s.Info(ctx); err == nil && info.Config.Replicas > 0 {
			return info.Config.Replicas
		}
	}
	return 1
}

func streamConfig(s pipelines.Stream) (jetstream.StreamConfig, error) {
	cfg := jetstream.StreamConfig{
		Name:        s.Name,
		Description: s.Description,
		Subjects:    s.Subjects,
		Storage:     jetstream.FileStorage,
		MaxAge:      s.MaxAge.Duration,
		Duplicates:  s.DuplicateWindow.Duration,
		AllowDirect: s.AllowDirect,
		DenyDelete:  s.DenyDelete,
		DenyPurge:   s.DenyPurge,

		AllowAtomicPublish: s.AllowAtomic,
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

// serverMaxDeliver is the consumer's limit for n handler attempts.
func serverMaxDeliver(n int) int {
	if n <= 0 {
		return n
	}
	return n + 1
}
