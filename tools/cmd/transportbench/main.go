// Command transportbench measures the pipeline's watermill transport
// against watermill-nats (its jetstream package) on the same embedded
// JetStream server and topology: publishing N messages, and one
// pass-through stage on watermill's router (consume, publish the output,
// ack) over N messages already stored. It lives in the tools module so
// watermill-nats stays out of troy's dependencies.
//
//	go run ./tools/cmd/transportbench [-n 20000] [-size 4096] [-workers 8]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/natsembed"
)

func main() {
	n := flag.Int("n", 20000, "messages")
	size := flag.Int("size", 4096, "payload bytes")
	workers := flag.Int("workers", 8, "handler workers (ours) / in-flight messages")
	only := flag.String("only", "", "run only the transport whose name starts with this")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	onlyPrefix = *only
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*n, *size, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "transportbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

var onlyPrefix string

type transport struct {
	name string
	pub  func() (message.Publisher, error)
	sub  func() (message.Subscriber, string, error) // subscriber and the topic to subscribe
}

func run(n, size, workers int) error {
	dir, err := os.MkdirTemp("", "transportbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsembed.Start(natsembed.Config{StoreDir: dir, MaxPayload: natsembed.DefaultMaxPayload})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect("transportbench")
	if err != nil {
		return err
	}
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	topo, err := pipelines.Load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := bus.Provision(ctx, js, topo); err != nil {
		return err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	transports := []transport{
		{"troy bus (raw jetstream, async publish)",
			func() (message.Publisher, error) { return &bus.Publisher{JS: js}, nil },
			func() (message.Subscriber, string, error) {
				return &bus.Subscriber{JS: js, Topology: topo, Workers: workers}, pipelines.ConsumerGraph, nil
			}},
		{"watermill-nats v2 jetstream",
			func() (message.Publisher, error) {
				return wmjs.NewPublisher(wmjs.PublisherConfig{Conn: nc, Logger: watermill.NopLogger{}})
			},
			func() (message.Subscriber, string, error) {
				s, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{Conn: nc, Logger: watermill.NopLogger{}, AckAsync: true,
					ResourceInitializer: wmjs.ExistingConsumer(func(string, string) jetstream.ConsumerConfig {
						return jetstream.ConsumerConfig{Name: pipelines.ConsumerGraph}
					}, "")})
				return s, pipelines.StreamTraces, err
			}},
	}
	fmt.Printf("%d messages of %d bytes, embedded JetStream (file store), %d workers\n", n, size, workers)
	for _, tr := range transports {
		if !strings.HasPrefix(tr.name, onlyPrefix) {
			continue
		}
		for _, s := range []string{pipelines.StreamTraces, pipelines.StreamGraphs} {
			if st, err := js.Stream(ctx, s); err == nil {
				_ = st.Purge(ctx)
			}
		}
		pub, err := tr.pub()
		if err != nil {
			return err
		}
		start := time.Now()
		const batch = 100
		for i := 0; i < n; i += batch {
			msgs := make([]*message.Message, 0, batch)
			for j := i; j < min(i+batch, n); j++ {
				msgs = append(msgs, message.NewMessage("in-"+tr.name[:4]+strconv.Itoa(j), payload))
			}
			if err := pub.Publish("troy.trace.bench", msgs...); err != nil {
				return fmt.Errorf("%s: publish: %w", tr.name, err)
			}
		}
		pubSecs := time.Since(start).Seconds()

		sub, topic, err := tr.sub()
		if err != nil {
			return err
		}
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		r.AddHandler("pass", topic, sub, "troy.graph.bench", pub, func(m *message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out-"+m.UUID, m.Payload)}, nil
		})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start = time.Now()
		go func() { done <- r.Run(rctx) }()
		st, err := js.Stream(ctx, pipelines.StreamGraphs)
		if err != nil {
			cancel()
			return err
		}
		deadline := time.Now().Add(5 * time.Minute)
		for {
			info, err := st.Info(ctx)
			if err == nil && info.State.Msgs >= uint64(n) {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				return fmt.Errorf("%s: stage did not finish in 5 minutes", tr.name)
			}
			time.Sleep(5 * time.Millisecond)
		}
		stageSecs := time.Since(start).Seconds()
		cancel()
		<-done
		fmt.Printf("  %-40s publish %8.0f msg/s   pass-through stage %8.0f msg/s\n", tr.name, float64(n)/pubSecs, float64(n)/stageSecs)
	}
	return nil
}
