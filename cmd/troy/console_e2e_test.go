package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent/guardrails"
	"github.com/troy-audit/troy/pkg/agentrun"
	"github.com/troy-audit/troy/pkg/bus"
)

// The web console in a real browser: it connects to the live feed, a
// trace streamed in shows its violations without a reload, a finished
// report opens as its trace view, and an approval waiting is approved with
// its button — all without one console message.
func TestWebConsoleInChromium(t *testing.T) {
	dir := t.TempDir()
	natsURL, base := startServe(t, dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()
	var mu sync.Mutex
	var console []string
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			console = append(console, string(ev.Type))
		case *runtime.EventExceptionThrown:
			console = append(console, "exception: "+ev.ExceptionDetails.Text)
		}
	}))

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#live.on"))), "the console connects to the live feed")

	// a trace streamed in over the API: its findings appear live
	for _, body := range []string{
		`{"step_id": "1", "type": "tool_call", "name": "crm", "metadata": {"data_classification": "pii"}}`,
		`{"step_id": "2", "type": "tool_call", "name": "http_post", "metadata": {"network_zone": "external"}}`,
	} {
		resp, err := http.Post(base+"/v1/traces/console-live/steps?agent=bot", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#violations tr[data-trace="console-live"]`))))
	rows, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#violations tbody")))
	require.NoError(t, err)
	assert.Contains(t, rows, "pii-exfiltration")
	assert.Contains(t, rows, "external-call-after-pii")

	// a whole trace: its report is listed, and opens as the trace view
	traces, _ := examples(t)
	f, err := os.Open(filepath.Join(traces, "support_bot.json"))
	require.NoError(t, err)
	resp, err := http.Post(base+"/v1/traces", "application/json", f)
	f.Close()
	require.NoError(t, err)
	resp.Body.Close()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#reports a.trace-link`)),
		chromedp.Click(chromedp.CSS(`#reports a.trace-link`)),
		chromedp.WaitVisible(chromedp.CSS(`svg#graph`))))
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	nodes, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("rect.node").length`))
	require.NoError(t, err)
	assert.Equal(t, "troy audit: support-bot-pii-exfil-001", title)
	assert.Equal(t, 5, nodes)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#reports a.trace-link`))))
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	art := os.Getenv("TROY_TEST_ARTIFACTS")
	if art == "" {
		art = t.TempDir()
	}
	require.NoError(t, os.WriteFile(filepath.Join(art, "console.png"), shot, 0o644))

	// an agent's call waiting for a person: approved with its button
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	approvals, err := agentrun.OpenApprovals(context.Background(), js)
	require.NoError(t, err)
	answer := make(chan guardrails.Answer, 1)
	go func() {
		a, err := approvals.WithTimeout(time.Minute).Approve(context.Background(), guardrails.ApprovalRequest{Tool: "delete_rows",
			Arguments: map[string]any{"table": "orders"}, RunID: "run-console", Rationale: "clean up the test orders"})
		assert.NoError(t, err)
		answer <- a
	}()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#approvals button.approve`)),
		chromedp.Click(chromedp.CSS(`#approvals button.approve`))))
	select {
	case a := <-answer:
		assert.True(t, a.Approved, "approved from the console")
	case <-time.After(30 * time.Second):
		t.Fatal("the console's approval never reached the agent")
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, console, "nothing on the console")
}
