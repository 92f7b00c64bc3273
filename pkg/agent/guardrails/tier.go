// Package guardrails screens an agent's tool calls before they run and
// their results before the model reads them: risk tiers, scanners built on
// pkg/detect (the detectors audits and the guard use), self-modification
// protection, troy policies as a live guard over the whole run, and human
// approval. A call it blocks never runs.
package guardrails

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/troy-audit/troy/pkg/agent/tools"
)

// Tier is how risky a call is.
type Tier int

// Tiers, in order.
const (
	Safe Tier = iota
	Warning
	Danger
)

var tierNames = []string{"SAFE", "WARNING", "DANGER"}

func (t Tier) String() string {
	if t < Safe || t > Danger {
		return fmt.Sprintf("Tier(%d)", int(t))
	}
	return tierNames[t]
}

// MarshalJSON writes the tier's name.
func (t Tier) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON reads a tier's name.
func (t *Tier) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseTier(s)
	*t = v
	return err
}

// ParseTier reads SAFE, WARNING or DANGER (any case).
func ParseTier(s string) (Tier, error) {
	for i, n := range tierNames {
		if strings.EqualFold(s, n) {
			return Tier(i), nil
		}
	}
	return Safe, fmt.Errorf("%q is not SAFE, WARNING or DANGER", s)
}

// baseTier is a tool's tier from its safety class.
func baseTier(s tools.Safety) Tier {
	switch s {
	case tools.ReadOnly:
		return Safe
	case tools.MutatesState:
		return Warning
	}
	return Danger // executes code, network, unknown
}

// discriminators name the argument that says what a call does.
var discriminators = map[string]string{
	"file_system": "operation", "execute_code": "language", "scratchpad": "action", "analyze_data": "operation",
}

// operationTiers replace the class tier for these operations.
var operationTiers = map[string]Tier{
	"file_system:read": Safe, "file_system:list": Safe, "file_system:glob": Safe, "file_system:stat": Safe,
	"file_system:write": Warning, "file_system:append": Warning, "file_system:mkdir": Warning,
	"file_system:delete":  Danger,
	"execute_code:python": Danger, "execute_code:bash": Danger,
	// analyze_data query runs model SQL: read-only and locked down, but
	// more than a lookup (the reference's eval at SAFE, §5.3 #12)
	"analyze_data:query": Warning,
}

// operation is "tool:op" for a call, or "" when the tool has none.
func operation(tool string, args map[string]any) string {
	key, ok := discriminators[tool]
	if !ok {
		return ""
	}
	if v, ok := args[key].(string); ok {
		return tool + ":" + v
	}
	return ""
}
