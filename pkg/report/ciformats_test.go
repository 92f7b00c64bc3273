package report_test

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/explain"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/report"
	"github.com/troy-audit/troy/pkg/trace"
)

// exampleFindings audits the shipped example traces in process, plus one
// rejected input and one rule that errors.
func exampleFindings(t *testing.T) (*policy.Policy, []report.Findings) {
	t.Helper()
	p, err := policy.Load("../../examples/policy.yaml")
	require.NoError(t, err)
	// a rule that cannot be evaluated on steps without an amount
	p.Rules = append(p.Rules, policy.Rule{RuleID: "amount-doubled", Description: "amount doubled over 100", Severity: "medium",
		Condition: "step.input.amount * 2 > 100"})
	e, err := policy.Compile(p)
	require.NoError(t, err)
	files, err := filepath.Glob("../../examples/traces/*.json")
	require.NoError(t, err)
	var all []report.Findings
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		tr, err := trace.Parse(data, trace.Limits{})
		require.NoError(t, err)
		res := e.Evaluate(tr)
		all = append(all, report.FindingsOf(filepath.Base(f), &report.Audit{Trace: tr, Violations: res.Violations, RuleErrors: res.RuleErrors}))
	}
	all = append(all, report.RejectedFindings(report.Entry{Source: "broken.json", Problems: []string{"line 1: not JSON"}}))
	return e.Policy(), all
}

func schemaFile(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join("..", "..", ".cache", "schemas", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run make test (or bash scripts/test-deps.sh), which fetches the published schemas", path)
	}
	return path
}

// The JUnit file is valid against the Jenkins JUnit XSD (checked by
// xmllint), and says what CI shows: a suite per trace, a case per rule, a
// failure per violation, an error per rule that could not be evaluated
// and per rejected input.
func TestJUnitIsValidAndComplete(t *testing.T) {
	p, all := exampleFindings(t)
	b, err := report.JUnit(p, all)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "troy.xml")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	xmllint, err := exec.LookPath("xmllint")
	require.NoError(t, err, "xmllint is needed (make test installs libxml2-utils)")
	out, err := exec.Command(xmllint, "--noout", "--schema", schemaFile(t, "jenkins-junit.xsd"), file).CombinedOutput()
	require.NoError(t, err, "%s", out)

	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name     string `xml:"name,attr"`
				Failures []struct {
					Type    string `xml:"type,attr"`
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Errors []struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc))
	require.Len(t, doc.Suites, len(all))
	violations, ruleErrors := 0, 0
	for i, f := range all {
		s := doc.Suites[i]
		if f.Rejected != nil {
			require.Len(t, s.Cases, 1)
			assert.Contains(t, s.Cases[0].Errors[0].Message, "not JSON")
			continue
		}
		assert.Equal(t, f.TraceID, s.Name)
		require.Len(t, s.Cases, len(p.Rules), "a case per rule, passing ones too")
		for _, c := range s.Cases {
			violations += len(c.Failures)
			ruleErrors += len(c.Errors)
		}
		violations -= len(f.Violations)
		ruleErrors -= len(f.RuleErrors)
	}
	assert.Zero(t, violations, "a failure per violation")
	assert.Zero(t, ruleErrors, "an error per rule error")
	assert.Positive(t, doc.Failures)
	assert.Positive(t, doc.Errors)
	assert.Contains(t, string(b), `type="critical"`, "the severity is the failure's type")
	assert.Contains(t, string(b), "at step ", "each failure names its step")
}

// The SARIF log is valid against the SARIF 2.1.0 JSON schema, has the
// policy's rules, a result per violation pointing at the line of its step
// in its trace file, and notifications for rule errors and rejections.
func TestSARIFIsValidAndLocated(t *testing.T) {
	p, all := exampleFindings(t)
	b, err := report.SARIF(p, all, report.SARIFOptions{Root: "examples/traces", Version: "test",
		Read: func(source string) ([]byte, error) {
			return os.ReadFile(filepath.Join("../../examples/traces", source))
		}})
	require.NoError(t, err)

	c := jsonschema.NewCompiler()
	sch, err := c.Compile(schemaFile(t, "sarif-2.1.0.json"))
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(doc))

	var log struct {
		Runs []struct {
			Tool struct {
				Driver struct {
					Rules []struct{ ID string } `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Invocations []struct {
				ExecutionSuccessful bool `json:"executionSuccessful"`
				Notifications       []struct {
					Message struct{ Text string } `json:"message"`
				} `json:"toolExecutionNotifications"`
			} `json:"invocations"`
			Results []struct {
				RuleID     string `json:"ruleId"`
				Properties struct {
					StepID string `json:"step_id"`
				} `json:"properties"`
				Level     string `json:"level"`
				Locations []struct {
					Physical struct {
						Artifact struct{ URI string }    `json:"artifactLocation"`
						Region   struct{ StartLine int } `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(b, &log))
	run := log.Runs[0]
	assert.Len(t, run.Tool.Driver.Rules, len(p.Rules))
	want := 0
	for _, f := range all {
		want += len(f.Violations)
	}
	require.Len(t, run.Results, want, "a result per violation")
	for _, r := range run.Results {
		loc := r.Locations[0].Physical
		assert.True(t, strings.HasPrefix(loc.Artifact.URI, "examples/traces/"), loc.Artifact.URI)
		require.Positive(t, loc.Region.StartLine, "%s: the line of its step", r.RuleID)
		data, err := os.ReadFile(filepath.Join("../..", loc.Artifact.URI))
		require.NoError(t, err)
		line := strings.Split(string(data), "\n")[loc.Region.StartLine-1]
		assert.Regexp(t, `"step_id":\s*"`+regexp.QuoteMeta(r.Properties.StepID)+`"`, line, "%s points at its own step", r.RuleID)
	}
	assert.False(t, run.Invocations[0].ExecutionSuccessful, "a rejected input is not a clean run")
	texts := ""
	for _, n := range run.Invocations[0].Notifications {
		texts += n.Message.Text + "\n"
	}
	assert.Contains(t, texts, "broken.json was not audited")
	assert.Contains(t, texts, "rule amount-doubled could not be evaluated")
}

// A .jsonl input's results point at its line: every trace there has its
// own, whatever its steps are called.
func TestSARIFLocatesJSONLLines(t *testing.T) {
	p, all := exampleFindings(t)
	var one report.Findings
	for _, f := range all {
		if len(f.Violations) > 0 {
			one = f
			break
		}
	}
	one.Source = "batch.jsonl:7"
	b, err := report.SARIF(p, []report.Findings{one}, report.SARIFOptions{Root: "in",
		Read: func(string) ([]byte, error) { t.Fatal("a .jsonl line is not read again"); return nil, nil }})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"uri": "in/batch.jsonl"`)
	assert.Equal(t, len(one.Violations)+len(one.RuleErrors), strings.Count(string(b), `"startLine": 7`), "results and rule errors")
}

// audit.json keeps text as it was ("a > b"), and a rule error's "<nil>"
// reads as nil in report.md, not as an HTML entity.
func TestAuditTextIsNotHTMLEscaped(t *testing.T) {
	tr := &trace.Trace{TraceID: "t", AgentName: "a", Steps: []*trace.Step{{StepID: "1", Type: "tool_call", Name: "sql", Input: map[string]any{"q": "x > 1 & y < 2"}}}}
	a := &report.Audit{SchemaVersion: report.SchemaVersion, Trace: tr, RuleErrors: []policy.RuleError{{RuleID: "r", StepID: "1", Error: "invalid operation: <nil> * int"}}}
	b, err := report.MarshalAudit(a)
	require.NoError(t, err)
	assert.Contains(t, string(b), "x > 1 & y < 2")
	md := string(report.Markdown(a))
	assert.Contains(t, md, "invalid operation: nil * int")
	assert.NotContains(t, md, "&lt;nil&gt;")
}

// report.md shows everything the explanation has: alternatives and
// confidence too, as the original tool did.
func TestMarkdownShowsAlternativesAndConfidence(t *testing.T) {
	tr := &trace.Trace{TraceID: "t", AgentName: "a", Steps: []*trace.Step{{StepID: "1", Type: "tool_call", Name: "sql"}}}
	a := &report.Audit{SchemaVersion: report.SchemaVersion, Trace: tr,
		Explanations: map[string]explain.Step{"1": {StepID: "1", Why: "to count", Alternatives: "a vetted report", Confidence: 0.75}}}
	md := string(report.Markdown(a))
	assert.Contains(t, md, "- **Alternatives:** a vetted report")
	assert.Contains(t, md, "- **Confidence:** 75%")
}

// A batch's rule errors are counted per rule (steps, traces, the first
// error) in batch.json and summary.md, and said in one line.
func TestBatchRuleErrors(t *testing.T) {
	errs := []policy.RuleError{{RuleID: "r", StepID: "1", Error: "invalid operation: <nil> * int"}, {RuleID: "r", StepID: "2", Error: "x"}, {RuleID: "q", StepID: "1", Error: "y"}}
	rc := report.CountRuleErrors(errs)
	require.Len(t, rc, 2)
	assert.Equal(t, report.RuleErrorCount{RuleID: "r", Steps: 2, First: "invalid operation: <nil> * int"}, rc[0])
	b := report.NewBatch("p", "sha256:00", []report.Entry{
		{Source: "a", TraceID: "a", Status: report.StatusAudited, RuleErrors: rc},
		{Source: "b", TraceID: "b", Status: report.StatusAudited, RuleErrors: rc[:1]},
	}, time.Now(), time.Now())
	require.Len(t, b.RuleErrors, 2)
	assert.Equal(t, 4, b.RuleErrors[0].Steps)
	assert.Equal(t, 2, b.RuleErrors[0].Traces)
	assert.Contains(t, string(report.SummaryMarkdown(b)), "| `r` | 4 | 2 | invalid operation: nil * int |")
	assert.Equal(t, "2 rules could not be evaluated on 5 steps (first: r: invalid operation: nil * int)", report.RuleErrorLine(b.RuleErrors))
}
