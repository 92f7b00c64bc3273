package llm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/llm/llmtest"
)

const key = "sk-test-DO-NOT-LEAK-1234567890"

func client(t *testing.T, url string, mod func(*llm.Config)) *llm.Client {
	t.Helper()
	cfg := llm.Config{BaseURL: url, APIKey: key, Timeout: 2 * time.Second, MaxRetries: 3}
	if mod != nil {
		mod(&cfg)
	}
	c, err := llm.New(cfg)
	require.NoError(t, err)
	return c
}

var hello = []llm.Message{{Role: "user", Content: "hello"}}

func TestChatSucceedsAndCountsTokens(t *testing.T) {
	srv := llmtest.New(t, func(int, llmtest.Request) llmtest.Response { return llmtest.Response{Content: "hi"} })
	r, err := client(t, srv.BaseURL(), nil).Chat(context.Background(), hello, true)
	require.NoError(t, err)
	assert.Equal(t, "hi", r.Content)
	assert.Equal(t, 100, r.PromptTokens)
	assert.Equal(t, 20, r.CompletionTokens)
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	srv := llmtest.New(t, func(call int, _ llmtest.Request) llmtest.Response {
		if call == 1 {
			return llmtest.Response{Status: 429, Header: map[string]string{"Retry-After": "1"}, Body: `{"error": {"message": "slow down"}}`}
		}
		return llmtest.Response{Content: "ok"}
	})
	start := time.Now()
	r, err := client(t, srv.BaseURL(), nil).Chat(context.Background(), hello, false)
	require.NoError(t, err)
	assert.Equal(t, "ok", r.Content)
	assert.Equal(t, 2, srv.Calls())
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "waited as Retry-After asked")
}

func TestServerErrorThenSuccess(t *testing.T) {
	srv := llmtest.New(t, func(call int, _ llmtest.Request) llmtest.Response {
		if call == 1 {
			return llmtest.Response{Status: 500, Body: `{"error": {"message": "boom"}}`}
		}
		return llmtest.Response{Content: "ok"}
	})
	_, err := client(t, srv.BaseURL(), nil).Chat(context.Background(), hello, false)
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Calls())
}

func TestGivesUpAfterRetriesAndOnTimeouts(t *testing.T) {
	srv := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Status: 503, Body: `{"error": {"message": "down"}}`}
	})
	_, err := client(t, srv.BaseURL(), func(c *llm.Config) { c.MaxRetries = 2 }).Chat(context.Background(), hello, false)
	require.Error(t, err)
	assert.Equal(t, 3, srv.Calls(), "one try and two retries")

	slow := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Content: "late", Delay: 3 * time.Second}
	})
	start := time.Now()
	_, err = client(t, slow.BaseURL(), func(c *llm.Config) { c.Timeout = 200 * time.Millisecond; c.MaxRetries = 1 }).Chat(context.Background(), hello, false)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "per-request timeout, not the server's pace")
}

func TestKeyNeverInErrors(t *testing.T) {
	srv := llmtest.New(t, func(_ int, r llmtest.Request) llmtest.Response {
		return llmtest.Response{Status: 401, Body: `{"error": {"message": "bad key: ` + r.Authorization + `"}}`}
	})
	_, err := client(t, srv.BaseURL(), nil).Chat(context.Background(), hello, false)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), key)
	assert.Contains(t, err.Error(), "[redacted]")
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
}

func TestConcurrencyBound(t *testing.T) {
	srv := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Content: "ok", Delay: 50 * time.Millisecond}
	})
	c := client(t, srv.BaseURL(), func(c *llm.Config) { c.Concurrency = 3 })
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			_, err := c.Chat(context.Background(), hello, false)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 12, srv.Calls())
	assert.LessOrEqual(t, srv.MaxInFlight(), 3)
	assert.Equal(t, 3, srv.MaxInFlight(), "and it uses what it may")
}

func TestPricing(t *testing.T) {
	var warned []string
	p := &llm.Pricing{Prices: llm.DefaultPrices, Warn: func(m string) { warned = append(warned, m) }}
	assert.InDelta(t, (1000*0.15+500*0.60)/1e6, p.Cost("gpt-4o-mini", 1000, 500), 1e-12)
	assert.InDelta(t, p.Cost("gpt-4o-mini", 10, 10), p.Cost("gpt-4o-mini-2024-07-18", 10, 10), 1e-12, "dated names use the longest known prefix")
	assert.Zero(t, p.Cost("my-local-llama", 1000, 1000))
	assert.Zero(t, p.Cost("my-local-llama", 1000, 1000))
	assert.Equal(t, []string{"my-local-llama"}, warned, "warned once")
	assert.True(t, strings.HasPrefix(llm.DefaultModel, "gpt-"))
}
