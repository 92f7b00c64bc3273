package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
)

type noPolicies struct{}

func (noPolicies) Engine(_ context.Context, ref string) (*policy.Engine, error) {
	return nil, fmt.Errorf("%w: troy's store has no policy with id %q", policystore.ErrNotFound, ref)
}

// A check that cannot be judged as asked (unknown policy, bad request)
// still says "block" in its body: someone reading only the body (curl, a
// script) never takes it for an allow.
func TestGuardRefusalsSayBlock(t *testing.T) {
	ts := httptest.NewServer(Guard(&guard.Local{Policies: noPolicies{}}))
	defer ts.Close()
	for body, status := range map[string]int{
		`{"policy": "nope", "action": {"name": "bash"}}`:   http.StatusUnprocessableEntity,
		`{"mode": "sideways", "action": {"name": "bash"}}`: http.StatusBadRequest,
	} {
		resp, err := http.Post(ts.URL, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, body)
		assert.Equal(t, "block", got["decision"], body)
		assert.NotEmpty(t, got["error"], body)
	}
}
