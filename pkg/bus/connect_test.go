package bus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troy-audit/troy/pkg/bus"
)

func TestRedactURLHidesPasswords(t *testing.T) {
	got := bus.RedactURL("nats://ingest:s3cret@nats-1:4222, nats://ingest:s3cret@nats-2:4222,nats://nats-3:4222")
	assert.NotContains(t, got, "s3cret")
	assert.Contains(t, got, "nats://ingest:xxxxx@nats-1:4222")
	assert.Contains(t, got, "nats://nats-3:4222")
}
