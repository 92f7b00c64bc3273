package graph_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/services/graph"
)

// The graph stage on watermill's in-memory gochannel pub/sub, with no NATS
// at all: the stage is decode → library → messages, and nothing of the
// transport.
func TestGraphStageOnGoChannel(t *testing.T) {
	svc, err := graph.New(bus.Deps{}, graph.DefaultConfig())
	require.NoError(t, err)
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddHandler("graph", "traces", ps, "graphs", ps, svc.Handle)
	outputs, err := ps.Subscribe(context.Background(), "graphs")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()

	in := message.NewMessage("in-1", []byte(`{"trace_id":"t1","agent_name":"a","steps":[
		{"step_id":"1","type":"llm_call"},{"step_id":"2","type":"tool_call","name":"ls","parent_step_id":"1"}]}`))
	in.Metadata.Set(bus.MetaSubject, "troy.trace.r1")
	in.Metadata.Set(bus.HeaderPolicy, "sha256:abc")
	require.NoError(t, ps.Publish("traces", in))

	select {
	case out := <-outputs:
		out.Ack()
		assert.Equal(t, "troy.graph.r1", out.Metadata.Get(bus.MetaPublishTo))
		assert.Equal(t, "r1", out.Metadata.Get(bus.HeaderRun))
		assert.Equal(t, "sha256:abc", out.Metadata.Get(bus.HeaderPolicy))
		assert.Equal(t, bus.MsgID(bus.StageGraph, out.Metadata.Get(bus.HeaderKey), "sha256:abc"), out.UUID, "a redelivered input makes the same output id")
		var g events.Graphed
		require.NoError(t, json.Unmarshal(out.Payload, &g))
		assert.Equal(t, "t1", g.Trace.TraceID)
		assert.NotEmpty(t, g.Graph.Edges)
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
	}

	_, err = svc.Handle(message.NewMessage("bad", []byte(`{"trace_id":"../x","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`)))
	assert.True(t, bus.IsPermanent(err), "an invalid trace can never succeed: %v", err)
}
