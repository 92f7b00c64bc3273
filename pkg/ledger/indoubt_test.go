package ledger_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ledger"
)

// holdingProxy forwards a NATS connection and, while held, keeps what the
// server sends back: the server stores what it is sent, the client hears
// nothing until release (an ack lost, as far as the client can tell).
type holdingProxy struct {
	mu   sync.Mutex
	held bool
	cond *sync.Cond
}

func startProxy(t *testing.T, target string) (*holdingProxy, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	p := &holdingProxy{}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			go func() { _, _ = io.Copy(s, c) }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					p.mu.Lock()
					for p.held {
						p.cond.Wait()
					}
					p.mu.Unlock()
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return p, "nats://" + l.Addr().String()
}

func (p *holdingProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// An append whose ack never came (nor any answer to reading back) is in
// doubt; appending the same records again stores them exactly once.
func TestAnAppendInDoubtIsSettledByRetrying(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	proxy, url := startProxy(t, srv.Embedded.ClientURL()[len("nats://"):])
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	ctx := context.Background()
	w, err := ledger.Open(ctx, js, "run-doubt", "runner")
	require.NoError(t, err)
	_, _, err = w.Append(ctx, "iteration", map[string]any{"i": 0})
	require.NoError(t, err)

	for _, batch := range [][]ledger.Entry{
		{{Kind: "iteration", Data: map[string]any{"i": 1}}},
		{{Kind: "iteration", Data: map[string]any{"i": 2}}, {Kind: "iteration", Data: map[string]any{"i": 3}}},
	} {
		proxy.hold(true)
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err = w.AppendBatch(actx, batch)
		cancel()
		require.Error(t, err, "no ack came, nor an answer to reading back")
		// the server has the records meanwhile
		require.Eventually(t, func() bool {
			e, err := ledger.Read(ctx, srv.JS, "run-doubt")
			return err == nil && len(e) == batch[len(batch)-1].Data["i"].(int)+1
		}, 5*time.Second, 10*time.Millisecond)
		proxy.hold(false)
		seq, _, err := w.AppendBatch(ctx, batch) // the caller's retry
		require.NoError(t, err)
		assert.EqualValues(t, batch[len(batch)-1].Data["i"].(int)+1, seq)
	}
	_, _, err = w.Append(ctx, "run_end", map[string]any{"status": "complete"})
	require.NoError(t, err)

	entries, err := ledger.Read(ctx, srv.JS, "run-doubt")
	require.NoError(t, err)
	require.Len(t, entries, 5, "each record once")
	_, err = ledger.Verify("run-doubt", entries)
	require.NoError(t, err)
}
