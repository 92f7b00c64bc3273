package tools

import (
	"context"
	"encoding/json"
	"strings"
)

// LoadSkill brings a skill's instructions into the conversation; the system
// prompt carries only the index.
type LoadSkill struct{}

// Spec implements Tool.
func (LoadSkill) Spec() Spec {
	return Spec{
		Name:        "load_skill",
		Description: "Load the full instructions of a skill from the skill index.",
		Safety:      ReadOnly,
		Returns:     "the skill's instructions",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["name"],
 "properties":{"name":{"type":"string","minLength":1}}}`),
	}
}

// Run implements Tool.
func (LoadSkill) Run(_ context.Context, env *Env, raw json.RawMessage) (Output, *Error) {
	var a struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return Output{}, Errorf(InvalidInput, "load_skill arguments: %v", err)
	}
	if env.Skills == nil {
		return Output{}, Errorf(NotFound, "No skill named '%s'.", a.Name).Fix("This run has no skills.")
	}
	body, version, ok := env.Skills.Skill(a.Name)
	if !ok {
		return Output{}, Errorf(NotFound, "No skill named '%s'.", a.Name).
			Fix("Available skills: " + strings.Join(env.Skills.Names(), ", ") + ".")
	}
	if env.Notify != nil {
		env.Notify("skill.loaded", map[string]any{"skill": a.Name})
	}
	return Output{Content: body, Data: map[string]any{"version": version}}, nil
}
