package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
	missing := func(what string) error {
		return fmt.Errorf("the topology is not in place: %s is missing (an operator runs troy provision)", what)
	}
	failed := func(what string, err error) error {
		return fmt.Errorf("the topology cannot be checked: %s: %w (a request that times out may be one this user is not allowed)", what, err)
	}
	// by the name lists, which every user may read (a user may not be
	// allowed the details of streams it does not use)
	names := func(l jetstream.StreamNameLister) (map[string]bool, error) {
		out := map[string]bool{}
		for n := range l.Name() {
			out[n] = true
		}
		return out, l.Err()
	}
	streams, err := names(js.StreamNames(ctx))
	if err != nil {
		return failed("listing streams", err)
	}
	for _, s := range topo.Streams {
		if !streams[s.Name] {
			return missing("stream " + s.Name)
		}
	}
	for _, b := range topo.Buckets {
		if !streams["KV_"+b.Name] {
			return missing("bucket " + b.Name)
		}
	}
	consumers := map[string]map[string]bool{}
	for _, c := range topo.Durables() {
		if consumers[c.Stream] == nil {
			set, err := consumerNames(ctx, js.Conn(), c.Stream)
			if err != nil {
				return failed("listing the consumers of "+c.Stream, err)
			}
			consumers[c.Stream] = set
		}
		if !consumers[c.Stream][c.Name] {
			return missing("consumer " + c.Stream + "/" + c.Name)
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

// consumerNames lists a stream's consumers by name (the stream's handle,
// which jetstream would list them through, needs STREAM.INFO).
func consumerNames(ctx context.Context, nc *nats.Conn, stream string) (map[string]bool, error) {
	out := map[string]bool{}
	for {
		req, _ := json.Marshal(map[string]int{"offset": len(out)})
		m, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.NAMES."+stream, req)
		if err != nil {
			return nil, err
		}
		var resp struct {
			Consumers []string `json:"consumers"`
			Total     int      `json:"total"`
			Error     *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return nil, fmt.Errorf("consumer names of %s: %w", stream, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("consumer names of %s: %s", stream, resp.Error.Description)
		}
		before := len(out)
		for _, n := range resp.Consumers {
			out[n] = true
		}
		// done, or a page that added nothing (the list changed under us):
		// never ask for the same page forever
		if len(out) >= resp.Total || len(out) == before {
			return out, nil
		}
	}
}
