package trace

import "testing"

func TestLooksLikeChatKeys(t *testing.T) {
	for in, want := range map[string]bool{
		`{"messages":[]}`: true, `{"traj":[{"role":"user"}]}`: true,
		`{"steps":null,"messages":[]}`: false, `{"steps":[],"messages":[]}`: false,
		`{"trace_id":"x","steps":[]}`: false, `{"messages":`: false, `[]`: false,
		`{"a":{"messages":[]}}`: false,
	} {
		if got := looksLikeChat([]byte(in)); got != want {
			t.Errorf("looksLikeChat(%s) = %v, want %v", in, got, want)
		}
	}
}
