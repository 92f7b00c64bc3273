package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/policystore"
)

// maxGuardRequest bounds a check request (the action plus its history).
const maxGuardRequest = 8 << 20

// Guard handles POST /v1/guard/check: a guard.Request in, a guard.Decision
// out (200; block with a reason when the guard failed closed), or
// {"error": …} with 400 for a request that cannot be checked and 422 for an
// unknown or invalid policy.
func Guard(g guard.Guard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGuardRequest))
		if err != nil {
			writeJSON(w, http.StatusRequestEntityTooLarge, Problem{Error: "request over 8 MiB: send fewer history steps, or only a session_id"})
			return
		}
		var req guard.Request
		if err := json.Unmarshal(body, &req); err != nil {
			writeJSON(w, http.StatusBadRequest, Problem{Error: "request is not a guard request (JSON with action, policy, session_id…): " + err.Error()})
			return
		}
		d, err := g.Check(r.Context(), req)
		switch {
		case errors.Is(err, guard.ErrBadRequest):
			writeJSON(w, http.StatusBadRequest, refusal{Decision: guard.Block, Error: err.Error()})
		case errors.Is(err, policystore.ErrNotFound) || errors.Is(err, policy.ErrInvalid):
			writeJSON(w, http.StatusUnprocessableEntity, refusal{Decision: guard.Block, Error: err.Error()})
		default:
			// the decision, also when the guard failed closed (block, with
			// the reason): a guard answered, so a FailOpen client must not
			// read it as unreachable
			writeJSON(w, http.StatusOK, d)
		}
	})
}

// refusal is a check that could not be made as asked: the action is
// blocked (the status says why it was not judged), so a reader of the body
// alone never takes it for an allow.
type refusal struct {
	Decision string `json:"decision"`
	Error    string `json:"error"`
}
