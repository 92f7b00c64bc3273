package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderGet reads one stored message through the stream's leader (the
// STREAM.MSG.GET API), by sequence or as the last on a subject. Streams
// with direct gets (every KV bucket, the ledger) let any replica answer
// those, one that lags included: where a reader must see what was just
// written (a join's other half, a ledger writer settling a lost ack), it
// asks the leader.
func LeaderGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64, lastBySubject string) (*jetstream.RawStreamMsg, error) {
	req := struct {
		Seq     uint64 `json:"seq,omitempty"`
		LastFor string `json:"last_by_subj,omitempty"`
	}{seq, lastBySubject}
	body, _ := json.Marshal(req)
	// A request lost in a reconnect or a leader change is never answered:
	// give up after 5 s whatever the caller allows, so its caller retries.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, fmt.Errorf("reading %s from its leader: %w", stream, err)
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("reading %s from its leader: %w", stream, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case r.Error != nil:
		return nil, r.Error
	case r.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	msg := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Seq, Data: r.Message.Data}
	if len(r.Message.Header) > 0 {
		if msg.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("reading %s from its leader: %w", stream, err)
		}
	}
	return msg, nil
}

// KVLeaderGet is a bucket key's current value, read through the leader:
// jetstream.ErrKeyNotFound when it has none (never set, deleted, purged).
func KVLeaderGet(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, error) {
	m, err := LeaderGet(ctx, js.Conn(), "KV_"+bucket, 0, "$KV."+bucket+"."+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, jetstream.ErrKeyNotFound
	}
	return m.Data, nil
}
