package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Stored is one message read from a stream by sequence.
type Stored struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Data    []byte
}

// directReadTimeout bounds one batch's wait for the server.
const directReadTimeout = 10 * time.Second

// DirectFrom says where a DirectRead starts: at a sequence, or (when Seq
// is 0 and Since is set) at the first message stored at or after Since.
type DirectFrom struct {
	Seq   uint64
	Since time.Time
}

// DirectRead reads up to batch messages of a stream whose subject matches
// filter, in order, through batched direct gets ($JS.API.DIRECT.GET): any
// replica answers and no consumer is made, so a user granted only direct
// gets on a stream can follow it without being able to create, change or
// delete consumers (whose deliveries it could aim anywhere). It returns
// the messages and the sequence to read from next.
func DirectRead(ctx context.Context, nc *nats.Conn, stream, filter string, from DirectFrom, batch int) ([]Stored, uint64, error) {
	req := map[string]any{"batch": batch, "next_by_subj": filter}
	switch {
	case from.Seq > 0 || from.Since.IsZero():
		req["seq"] = max(from.Seq, 1)
	default:
		req["start_time"] = from.Since.UTC()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, 0, err
	}
	// a batch the server never finishes (a node gone mid-reply) ends here
	ctx, cancel := context.WithTimeout(ctx, directReadTimeout)
	defer cancel()
	next := from.Seq
	var out []Stored
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, next, fmt.Errorf("direct get on %s: %w", stream, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204": // end of batch
			return out, next, nil
		case "404": // nothing (more) matches
			return out, next, nil
		case "503":
			return out, next, fmt.Errorf("direct get on %s: %w (does the stream allow direct gets?)", stream, nats.ErrNoResponders)
		default:
			return out, next, fmt.Errorf("direct get on %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
		if err != nil {
			return out, next, fmt.Errorf("direct get on %s: a reply without a sequence", stream)
		}
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
		out = append(out, Stored{Seq: seq, Subject: m.Header.Get(nats.JSSubject), Time: ts, Data: m.Data})
		next = seq + 1
	}
}

// SubjectMatches reports whether subject matches a NATS pattern (* is one
// token, > the rest).
func SubjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}
