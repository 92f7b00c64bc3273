package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/console"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Findings published on the bus reach a page that opens (its state) and
// one that follows the feed (server-sent events), as they are published.
func TestConsoleFollowsTheFindings(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := console.New(ctx, console.Config{JS: srv.JS, Log: zerolog.Nop()})
	mux := http.NewServeMux()
	for p, h := range c.Handlers(func(_ string, h http.Handler) http.Handler { return h }, "read") {
		mux.Handle(p, h)
	}
	web := httptest.NewServer(mux)
	defer web.Close()

	tr := &trace.Trace{TraceID: "t-1", AgentName: "bot", Steps: []*trace.Step{{StepID: "s1", Type: "tool_call"}}}
	publish := func(rule string) {
		require.NoError(t, ocsf.Publish(ctx, srv.JS, "k-"+rule, []policy.Violation{{RuleID: rule, StepID: "s1", Severity: "high", Description: rule + " fired"}},
			ocsf.Context{Trace: tr, PolicyID: "p", PolicyHash: "sha256:00", Run: "r", Now: time.Now()}))
	}
	publish("before-open")
	require.Eventually(t, func() bool {
		resp, err := http.Get(web.URL + "/console/state")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct{ Violations []console.Violation }
		return json.NewDecoder(resp.Body).Decode(&st) == nil && len(st.Violations) == 1 && st.Violations[0].RuleID == "before-open"
	}, 10*time.Second, 50*time.Millisecond, "a page that opens sees what came before")

	resp, err := http.Get(web.URL + "/console/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	lines := bufio.NewScanner(resp.Body)
	next := func() string {
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "data: {\"") {
				return lines.Text()
			}
		}
		return ""
	}
	publish("live")
	ev := next()
	assert.Contains(t, ev, `"rule_id":"live"`)
	assert.Contains(t, ev, `"severity":"high"`)
	assert.Contains(t, ev, `"trace_id":"t-1"`)

	page, err := http.Get(web.URL + "/")
	require.NoError(t, err)
	defer page.Body.Close()
	assert.Equal(t, http.StatusOK, page.StatusCode)
	assert.Contains(t, page.Header.Get("Content-Security-Policy"), "default-src 'self'", "the page runs only its own script")

	cancel() // the server stopping ends the feed, so it can shut down
	done := make(chan struct{})
	go func() { next(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the live feed outlived the console")
	}
}
