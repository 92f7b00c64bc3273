package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pipelines"
	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/trace"
)

func TestPostTrace(t *testing.T) {
	srv, _ := bustest.Provisioned(t)
	h := Traces(srv.JS, TracesConfig{Limits: trace.Limits{MaxBytes: 512, MaxSteps: 10}, Policy: "sha256:def"})
	ts := httptest.NewServer(h)
	defer ts.Close()

	post := func(query, body string) (*http.Response, map[string]any) {
		resp, err := http.Post(ts.URL+"/"+query, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp, out
	}

	resp, out := post("?run=r1", `{"trace_id":"h1","agent_name":"a","steps":[{"step_id":"1","type":"llm_call"}]}`)
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Equal(t, "h1", out["trace_id"])
	assert.Equal(t, "sha256:def", out["policy"])
	s, err := srv.JS.Stream(context.Background(), pipelines.StreamIngest)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), "troy.ingest.r1")
	require.NoError(t, err)
	assert.Equal(t, "h1", m.Header.Get(bus.HeaderSource))
	assert.Equal(t, "sha256:def", m.Header.Get(bus.HeaderPolicy))

	resp, out = post("", `{"trace_id":"h2","steps":[{"step_id":"1","type":"teleport"}]}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "invalid trace", out["error"])
	assert.Len(t, out["problems"], 2)

	resp, _ = post("", `{"trace_id":"`+strings.Repeat("x", 600)+`"}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	nopolicy := httptest.NewServer(Traces(srv.JS, TracesConfig{Limits: trace.DefaultLimits()}))
	defer nopolicy.Close()
	r2, err := http.Post(nopolicy.URL, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	r2.Body.Close()
	assert.Equal(t, http.StatusBadRequest, r2.StatusCode)

	resp, out = post("?run=a.b", `{}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, out["error"], `run "a.b"`)
}
