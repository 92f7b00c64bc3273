package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/agent"
	"github.com/troy-audit/troy/pkg/agent/tools"
	"github.com/troy-audit/troy/pkg/llm"
	"github.com/troy-audit/troy/pkg/llm/llmtest"
)

// The real go-openai client against a real HTTP server speaking chat
// completions with tool calls.
func TestRunOverOpenAIProtocol(t *testing.T) {
	answers := []llmtest.Response{
		{Content: P("s1", "file_system").Text},
		{ToolCalls: [][2]string{{"file_system", `{"operation":"write","path":"f.txt","content":"hi"}`}}},
		{Content: E("success", "wrote 2 characters", "in_progress", "s1").Text},
		{Content: P("s2", "submit").Text},
		{ToolCalls: [][2]string{{"submit", `{"answer":"done","status":"complete","confidence":1}`}}},
	}
	var reqs []llmtest.Request
	srv := llmtest.New(t, func(call int, r llmtest.Request) llmtest.Response {
		reqs = append(reqs, r)
		return answers[call-1]
	})
	prov, err := llm.DefaultProviders().Build(llm.ProviderConfig{Provider: "OpenAI", Model: "gpt-4o-mini", BaseURL: srv.BaseURL(),
		APIKey: "sk-test", Client: llm.Config{Timeout: 5 * time.Second}, Pricing: &llm.Pricing{Prices: llm.DefaultPrices}})
	require.NoError(t, err)
	reg, err := tools.NewRegistry(tools.FileSystem{}, tools.Submit{})
	require.NoError(t, err)
	ws := t.TempDir()
	rec := &agent.Recorder{}
	a, err := agent.New(agent.Config{Name: "oa", Model: prov, Tools: reg, Workspace: ws, Sink: rec})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "write hi", nil)
	require.NoError(t, err)
	require.Equal(t, agent.Complete, res.Status, res.Answer)
	assert.Equal(t, "done", res.Answer)
	b, _ := os.ReadFile(filepath.Join(ws, "f.txt"))
	assert.Equal(t, "hi", string(b))
	assert.Equal(t, 600, res.TotalTokens)
	assert.Greater(t, res.CostUSD, 0.0)

	require.Len(t, reqs, 5)
	assert.Equal(t, "Bearer sk-test", reqs[0].Authorization)
	assert.Empty(t, reqs[0].Tools, "ANALYZE offers no tools")
	assert.Nil(t, reqs[0].ToolChoice)
	assert.Len(t, reqs[1].Tools, 2)
	assert.Equal(t, "required", reqs[1].ToolChoice)
	assert.Equal(t, "system", reqs[1].Messages[0].Role)
	// OBSERVE: the assistant's call, then its result as a tool message.
	msgs := reqs[2].Messages
	var sawCall, sawResult bool
	for i, m := range msgs {
		if len(m.ToolCalls) == 1 && m.ToolCalls[0].Function.Name == "file_system" {
			sawCall = true
			require.Greater(t, len(msgs), i+1)
			next := msgs[i+1]
			assert.Equal(t, "tool", next.Role)
			assert.Equal(t, m.ToolCalls[0].ID, next.ToolCallID)
			assert.Equal(t, "Wrote 2 characters to f.txt", next.Content)
			sawResult = true
		}
	}
	assert.True(t, sawCall && sawResult)
	assert.Equal(t, "user", msgs[len(msgs)-1].Role)
}

// A provider that keeps failing ends the run failed, with the status code
// in the llm.response event.
func TestOpenAIProviderFailure(t *testing.T) {
	srv := llmtest.New(t, func(int, llmtest.Request) llmtest.Response {
		return llmtest.Response{Status: 400, Body: `{"error":{"message":"bad request: model not found","type":"invalid_request_error"}}`}
	})
	prov, err := llm.DefaultProviders().Build(llm.ProviderConfig{Provider: "openai", Model: "m", BaseURL: srv.BaseURL(), APIKey: "sk-secret-123"})
	require.NoError(t, err)
	reg, _ := tools.NewRegistry(tools.Submit{})
	rec := &agent.Recorder{}
	a, err := agent.New(agent.Config{Model: prov, Tools: reg, Workspace: t.TempDir(), Sink: rec})
	require.NoError(t, err)
	res, err := a.Run(context.Background(), "anything", nil)
	require.NoError(t, err)
	assert.Equal(t, agent.Failed, res.Status)
	assert.Contains(t, res.Answer, "model not found")
	assert.NotContains(t, res.Answer, "sk-secret-123")
	resp := rec.Of(agent.EventLLMResponse)
	require.Len(t, resp, 1)
	assert.Equal(t, 400, resp[0].Data["status_code"])
}
