package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/ocsf"
)

// watch reads a stream's subjects through an ordered consumer and calls fn
// for each message until ctx ends or fn returns false.
func watch(ctx context.Context, js jetstream.JetStream, streamName string, subjects []string, deliverAll bool, fn func(jetstream.Msg) bool) (func(), error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverNewPolicy}
	if deliverAll {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, streamName, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", streamName, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if cctx.Err() == nil && !fn(m) {
			cancel()
		}
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("reading %s: %w", streamName, err)
	}
	context.AfterFunc(cctx, cc.Stop)
	return cancel, nil
}

// WatchViolations calls fn for each finding of the run's trace from now on.
func WatchViolations(ctx context.Context, js jetstream.JetStream, runID string, fn func(ocsf.Finding)) (func(), error) {
	return watch(ctx, js, pipelines.StreamViolations, []string{"troy.violations.>"}, false, func(m jetstream.Msg) bool {
		var f ocsf.Finding
		if json.Unmarshal(m.Data(), &f) == nil && f.Unmapped["trace_id"] == runID {
			fn(f)
		}
		return true
	})
}

// Follow calls fn for each event of a run, from its first, until fn
// returns false or ctx ends.
func Follow(ctx context.Context, js jetstream.JetStream, runID string, fn func(agent.Event) bool) (func(), error) {
	return watch(ctx, js, pipelines.StreamAgentEvents, []string{EventsPrefix + runID + ".>"}, true, func(m jetstream.Msg) bool {
		var ev agent.Event
		if json.Unmarshal(m.Data(), &ev) != nil {
			return true
		}
		return fn(ev)
	})
}

// ReadEvents reads every stored event of a run.
func ReadEvents(ctx context.Context, js jetstream.JetStream, runID string) ([]agent.Event, error) {
	s, err := js.Stream(ctx, pipelines.StreamAgentEvents)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(EventsPrefix+runID+".>"))
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("run %s: no events stored (unknown run, or older than the stream keeps)", runID)
	}
	var mu sync.Mutex
	var out []agent.Event
	done := make(chan struct{})
	stop, err := Follow(ctx, js, runID, func(ev agent.Event) bool {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, ev)
		if uint64(len(out)) == total {
			close(done)
			return false
		}
		return uint64(len(out)) < total
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	select {
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		return out, nil
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("run %s: read %d of %d events in 10s", runID, len(out), total)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ReportWaiter waits for the audit report of a run's trace.
type ReportWaiter struct {
	ch   chan *events.Reported
	stop func()
}

// WatchReport starts watching for the report before the run starts, so it
// cannot be missed.
func WatchReport(ctx context.Context, js jetstream.JetStream, runID string) (*ReportWaiter, error) {
	w := &ReportWaiter{ch: make(chan *events.Reported, 1)}
	stop, err := watch(ctx, js, pipelines.StreamOutcomes, []string{"troy.report.live"}, false, func(m jetstream.Msg) bool {
		var r events.Reported
		if json.Unmarshal(m.Data(), &r) == nil && r.Audit != nil && r.Audit.Trace != nil && r.Audit.Trace.TraceID == runID {
			w.ch <- &r
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	w.stop = stop
	return w, nil
}

// Wait returns the report, or an error after timeout.
func (w *ReportWaiter) Wait(ctx context.Context, timeout time.Duration) (*events.Reported, error) {
	defer w.stop()
	select {
	case r := <-w.ch:
		return r, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("no audit report within %s", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// DeadLetters is where the runner's requests go when no delivery could
// finish them.
const DeadLetters = "troy.dlq.agent-runner.>"

// WaitResult waits for a run's outcome (already published, or to come), or
// for its request to be dead-lettered (then an outcome with Error says why).
func WaitResult(ctx context.Context, js jetstream.JetStream, runID string) (Outcome, error) {
	ch := make(chan Outcome, 2)
	stop, err := watch(ctx, js, pipelines.StreamAgentEvents, []string{ResultPrefix + runID}, true, func(m jetstream.Msg) bool {
		var o Outcome
		if json.Unmarshal(m.Data(), &o) == nil {
			ch <- o
			return false
		}
		return true
	})
	if err != nil {
		return Outcome{}, err
	}
	defer stop()
	since := time.Now().Add(-time.Minute)
	cons, err := js.OrderedConsumer(ctx, pipelines.StreamDlq, jetstream.OrderedConsumerConfig{FilterSubjects: []string{DeadLetters},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err == nil {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			var req Request
			if json.Unmarshal(m.Data(), &req) == nil && req.RunID == runID {
				o := Outcome{Error: "the agent-runner gave up on the run: " + m.Headers().Get(bus.HeaderReason)}
				o.RunID, o.SessionID, o.Status = req.RunID, req.SessionID, agent.Failed
				select {
				case ch <- o:
				default:
				}
			}
		})
		if err == nil {
			defer cc.Stop()
		}
	}
	select {
	case o := <-ch:
		return o, nil
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// Replay calls fn for every stored event of every run since a time, up to
// the last one stored when it was called.
func Replay(ctx context.Context, js jetstream.JetStream, since time.Time, fn func(agent.Event)) error {
	s, err := js.Stream(ctx, pipelines.StreamAgentEvents)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, pipelines.StreamAgentEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{EventsPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return err
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev agent.Event
			if json.Unmarshal(m.Data(), &ev) == nil {
				fn(ev)
			}
			if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream >= last {
				return nil
			}
		}
		if n == 0 {
			return nil // nothing more since `since`
		}
	}
}

// FindReport returns the newest audit report of a run's trace on the
// outcomes stream (reading the reports' summary headers, then the one
// body), or an error saying it is not there (outcomes expire with the
// stream's max age).
func FindReport(ctx context.Context, js jetstream.JetStream, runID string) (*events.Reported, error) {
	st, err := js.Stream(ctx, pipelines.StreamOutcomes)
	if err != nil {
		return nil, fmt.Errorf("outcomes: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("troy.report.live"))
	if err != nil {
		return nil, fmt.Errorf("outcomes: %w", err)
	}
	last := info.State.LastSeq
	var found uint64
	if info.State.Subjects["troy.report.live"] > 0 {
		cons, err := js.OrderedConsumer(ctx, pipelines.StreamOutcomes, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"troy.report.live"}, DeliverPolicy: jetstream.DeliverAllPolicy, HeadersOnly: true})
		if err != nil {
			return nil, fmt.Errorf("outcomes: %w", err)
		}
		it, err := cons.Messages()
		if err != nil {
			return nil, fmt.Errorf("outcomes: %w", err)
		}
		defer it.Stop()
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("outcomes: %w", err)
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if m.Headers().Get(events.HeaderTraceID) == runID {
				found = md.Sequence.Stream
			}
			if md.NumPending == 0 || md.Sequence.Stream >= last {
				break
			}
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("no audit report of run %s on %s (it may not have finished, or has expired)", runID, pipelines.StreamOutcomes)
	}
	raw, err := st.GetMsg(ctx, found)
	if err != nil {
		return nil, fmt.Errorf("outcomes: %w", err)
	}
	return events.Decode[events.Reported](raw.Data)
}
