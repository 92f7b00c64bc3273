package mcpproxy_test

import (
	"context"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/mcpproxy"
	"github.com/troy-audit/troy/pkg/policy"
)

// pipes is a stdio-like link: newline-delimited JSON over OS-less pipes,
// the framing of a child process's stdin and stdout.
func pipes() (mcp.Transport, mcp.Transport) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &mcp.IOTransport{Reader: ar, Writer: aw}, &mcp.IOTransport{Reader: br, Writer: bw}
}

func serve(b *testing.B, srv *mcp.Server) mcp.Transport {
	st, ct := pipes()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ss.Close() })
	return ct
}

// BenchmarkProxyCall measures a tools/call of an echo tool straight to
// the server and through the proxy (guard check with a cross-step rule
// over the session's history), both over stdio-like pipes; p50 and p99
// per call, and what the proxy adds.
func BenchmarkProxyCall(b *testing.B) {
	var posts atomic.Int32
	p, err := policy.Parse([]byte(secretThenNetwork))
	if err != nil {
		b.Fatal(err)
	}
	e, err := policy.Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	up := upstreamB(&posts)
	sessions := guard.NewMemSessions()
	px, err := mcpproxy.Connect(context.Background(), serve(b, up), mcpproxy.Config{
		Guard: &guard.Local{Policies: guard.Static{E: e}, Sessions: sessions}, Sessions: sessions, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	for _, c := range []struct {
		name string
		srv  *mcp.Server
	}{{"direct", up}, {"proxied", px.Server()}} {
		b.Run(c.name, func(b *testing.B) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(), serve(b, c.srv), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			params := &mcp.CallToolParams{Name: "echo", Arguments: args{Text: "hello"}}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := cs.CallTool(context.Background(), params); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func upstreamB(posts *atomic.Int32) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "http_post"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		posts.Add(1)
		return &mcp.CallToolResult{}, nil, nil
	})
	return srv
}
