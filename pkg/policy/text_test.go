package policy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTextMatchesJSON(t *testing.T) {
	values := []any{
		nil, "plain", 3.5, true,
		map[string]any{"b": []any{1.0, "x\n\"y\"", nil, false}, "a": map[string]any{"z": "é<&>", "c\x01": 1e21}},
		[]any{}, map[string]any{},
		map[string]string{"typed": "falls back to encoding/json"},
	}
	for _, v := range values {
		got := Text(v)
		switch v.(type) {
		case nil:
			assert.Equal(t, "", got)
		case string:
			assert.Equal(t, v, got)
		case float64:
			assert.Equal(t, "3.5", got)
		case bool:
			assert.Equal(t, "true", got)
		default:
			// same document as encoding/json, bar its HTML escaping
			var a, b any
			assert.NoError(t, json.Unmarshal([]byte(got), &a), got)
			want, _ := json.Marshal(v)
			assert.NoError(t, json.Unmarshal(want, &b))
			assert.Equal(t, b, a)
		}
	}
	assert.Equal(t, `{"a":{"c\u0001":1000000000000000000000,"z":"é<&>"},"b":[1,"x\n\"y\"",null,false]}`, Text(values[4]))
}
