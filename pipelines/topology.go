// Package pipelines holds troy's topology as data (topology.yaml): the
// streams, consumers and KV buckets that the services read and write.
package pipelines

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

//go:embed topology.yaml
var topologyYAML []byte

// Topology is the whole pipeline layout.
type Topology struct {
	Streams          []Stream        `json:"streams"`
	Consumers        []Consumer      `json:"consumers"`
	ConsumerDefaults ConsumerOptions `json:"consumer_defaults"`
	Buckets          []Bucket        `json:"buckets"`
	// RetiredConsumers were in an earlier layout; provisioning deletes them
	// (a consumer whose filter no longer fits its stream blocks the update).
	RetiredConsumers []Consumer `json:"retired_consumers"`
	// Replicas of every stream and bucket: 1 on one server, 3 on a 3-node
	// cluster; 0 keeps what the server has. Set at start (troy serve
	// --replicas), not in the file.
	Replicas int `json:"-"`
}

// Stream is one JetStream stream.
type Stream struct {
	Name            string   `json:"name"`
	Description     string   `json:"description"`
	Subjects        []string `json:"subjects"`
	Retention       string   `json:"retention"` // limits | interest | workqueue
	MaxAge          Duration `json:"max_age"`
	DuplicateWindow Duration `json:"duplicate_window"`
	// AllowDirect lets clients read single messages without a stream API
	// round trip through the meta layer (the streamer's log lookups).
	AllowDirect bool `json:"allow_direct,omitempty"`
	// Sealed history: messages cannot be deleted nor the stream purged
	// (the ledger). Rollups stay off for every stream.
	DenyDelete bool `json:"deny_delete,omitempty"`
	DenyPurge  bool `json:"deny_purge,omitempty"`
	// AllowAtomic admits atomic batch publishes (the ledger's batched
	// appends: all records of a batch or none).
	AllowAtomic bool `json:"allow_atomic,omitempty"`
}

// Consumer is one durable pull consumer, named for the service that reads it.
type Consumer struct {
	Name           string   `json:"name"`
	Stream         string   `json:"stream"`
	FilterSubjects []string `json:"filter_subjects"`
	// MaxDeliver overrides the default; -1 retries forever (forwarders,
	// which must drop nothing while a destination is down).
	MaxDeliver int `json:"max_deliver,omitempty"`
	// MaxAckPending overrides the default; 1 delivers strictly in order.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// Partitions > 0 makes this entry a family of consumers, <name>-0 …
	// <name>-(n-1), with "{p}" in the filters replaced by the partition.
	Partitions int `json:"partitions,omitempty"`
	// Pinned consumers deliver to one client at a time (JetStream's pinned
	// priority group PriorityGroup); another is pinned when it stops pulling.
	Pinned bool `json:"pinned,omitempty"`
}

// PriorityGroup is the priority group of pinned consumers.
const PriorityGroup = "troy"

// Partition returns the consumer of partition p of a partitioned entry.
func (c Consumer) Partition(p int) Consumer {
	out := c
	out.Name = fmt.Sprintf("%s-%d", c.Name, p)
	out.Partitions = 0
	out.FilterSubjects = make([]string, len(c.FilterSubjects))
	for i, f := range c.FilterSubjects {
		out.FilterSubjects[i] = strings.ReplaceAll(f, "{p}", strconv.Itoa(p))
	}
	return out
}

// Durables lists the durable consumers to provision: every entry, with a
// partitioned one expanded into its partitions.
func (t *Topology) Durables() []Consumer {
	var out []Consumer
	for _, c := range t.Consumers {
		if c.Partitions == 0 {
			out = append(out, c)
			continue
		}
		for p := range c.Partitions {
			out = append(out, c.Partition(p))
		}
	}
	return out
}

// ConsumerOptions apply to every consumer.
type ConsumerOptions struct {
	AckWait       Duration `json:"ack_wait"`
	MaxDeliver    int      `json:"max_deliver"`
	MaxAckPending int      `json:"max_ack_pending"`
}

// Bucket is one KV bucket.
type Bucket struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	TTL         Duration `json:"ttl"`
	// MarkerTTL enables per-message TTLs, so delete markers can expire.
	MarkerTTL Duration `json:"marker_ttl"`
}

// Duration reads "30s"-style durations.
type Duration struct{ time.Duration }

// UnmarshalJSON parses a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

// Load returns the topology shipped in the binary.
func Load() (*Topology, error) {
	var t Topology
	if err := yaml.UnmarshalStrict(topologyYAML, &t); err != nil {
		return nil, fmt.Errorf("pipelines/topology.yaml: %w", err)
	}
	for _, c := range t.Consumers {
		if c.Partitions < 0 || c.Partitions > 1024 {
			return nil, fmt.Errorf("pipelines/topology.yaml: consumer %s: partitions must be 0 to 1024, got %d", c.Name, c.Partitions)
		}
	}
	return &t, nil
}

// Consumer returns the consumer of the given name: an entry, or one
// partition of a partitioned entry ("streamer-3").
func (t *Topology) Consumer(name string) (Consumer, bool) {
	for _, c := range t.Durables() {
		if c.Name == name {
			return c, true
		}
	}
	for _, c := range t.Consumers {
		if c.Name == name {
			return c, true
		}
	}
	return Consumer{}, false
}

// Partitions returns the durable consumer names of a partitioned entry, in
// partition order (nil when the entry is not partitioned).
func (t *Topology) Partitions(name string) []string {
	c, ok := t.Consumer(name)
	if !ok || c.Partitions == 0 {
		return nil
	}
	out := make([]string, c.Partitions)
	for p := range c.Partitions {
		out[p] = c.Partition(p).Name
	}
	return out
}

// Stream returns the stream of the given name.
func (t *Topology) Stream(name string) (Stream, bool) {
	for _, s := range t.Streams {
		if s.Name == name {
			return s, true
		}
	}
	return Stream{}, false
}
