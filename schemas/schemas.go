// Package schemas publishes the JSON Schemas of troy's contracts (trace,
// policy, audit.json, batch.json, rejection) for other languages to read.
// The files are generated from the Go types (make schemas) and a test keeps
// them in step.
package schemas

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/troy-audit/troy/pkg/agent/spec"
	"github.com/troy-audit/troy/pkg/events"
	"github.com/troy-audit/troy/pkg/guard"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

//go:embed *.schema.json
var Files embed.FS

// Schema is one published schema.
type Schema struct {
	File        string
	Title       string
	Description string
	Type        any
	Open        bool // extra properties allowed (producers may send more than troy reads)
}

// All lists the published schemas.
var All = []Schema{
	{"trace.schema.json", "troy trace", "A canonical agent trace. ingest also accepts numeric step ids and any-case step types, and normalises them to this form.", &trace.Trace{}, true},
	{"policy.schema.json", "troy policy", "A policy file (JSON, or YAML of the same shape). Conditions are expr-lang expressions; see README.md.", &policy.Policy{}, false},
	{"audit.schema.json", "troy audit.json", "One trace audited against one policy: everything needed to replay the audit.", &report.Audit{}, false},
	{"batch.schema.json", "troy batch.json", "Every input of one troy audit-batch run, audited or rejected.", &report.Batch{}, false},
	{"rejection.schema.json", "troy rejection", "Published on troy.rejected.<run> for input that is not a valid trace.", &events.Rejected{}, false},
	{"guard-request.schema.json", "troy guard request", "Asks whether one proposed action may run: NATS request on troy.guard.check, or POST /v1/guard/check.", &guard.Request{}, false},
	{"agent-config.schema.json", "troy agent config", "agent.yaml / agent.json: everything one governed agent run needs (troy agent run CONFIG GOAL). ${VAR} in a string value reads the environment.", &spec.File{}, false},
	{"guard-decision.schema.json", "troy guard decision", "The guard's answer: allow or block, with the violations and the policy hash. An error reply is {\"error\": \"…\"}.", &guard.Decision{}, false},
}

// qualifiedName names definitions by package too: trace.Step and
// explain.Step are different things.
func qualifiedName(t reflect.Type) string {
	pkg := path.Base(t.PkgPath())
	if alias, ok := conceptOf[pkg]; ok {
		pkg = alias
	}
	if pkg == "." || pkg == "" || strings.EqualFold(pkg, t.Name()) {
		return t.Name()
	}
	return strings.ToUpper(pkg[:1]) + pkg[1:] + t.Name()
}

// conceptOf names a package's types in the schemas by the concept rather
// than the Go package (the published names stay when a package is renamed).
var conceptOf = map[string]string{"execgraph": "graph"}

// Generate renders a schema from its Go type.
func Generate(s Schema) ([]byte, error) {
	r := &jsonschema.Reflector{AllowAdditionalProperties: s.Open, Namer: qualifiedName}
	sc := r.Reflect(s.Type)
	sc.ID = jsonschema.ID("https://troy.dev/schemas/" + s.File)
	sc.Title = s.Title
	sc.Description = s.Description
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", s.File, err)
	}
	return append(b, '\n'), nil
}
