package report

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	"github.com/troy-audit/troy/pkg/policy"
)

// Findings is what the CI formats (JUnit, SARIF) need of one input: an
// audited trace's violations and rule errors, or why it was rejected.
type Findings struct {
	Source     string // the input file (file:line for .jsonl)
	TraceID    string
	AgentName  string
	RiskScore  int
	Violations []policy.Violation
	RuleErrors []policy.RuleError
	Rejected   []string // problems, when the input was not audited
	Steps      map[string]StepInfo
}

// StepInfo names a step for a message: its type and name.
type StepInfo struct {
	Type, Name string
}

// FindingsOf takes what the CI formats need from an audit.
func FindingsOf(source string, a *Audit) Findings {
	f := Findings{Source: source, RiskScore: a.RiskScore, Violations: a.Violations, RuleErrors: a.RuleErrors, Steps: map[string]StepInfo{}}
	if a.Trace != nil {
		f.TraceID, f.AgentName = a.Trace.TraceID, a.Trace.AgentName
		// only the steps a message names: a large batch keeps little per trace
		named := map[string]bool{}
		for _, v := range a.Violations {
			named[v.StepID] = true
		}
		for _, e := range a.RuleErrors {
			named[e.StepID] = true
		}
		for _, s := range a.Trace.Steps {
			if named[s.StepID] {
				f.Steps[s.StepID] = StepInfo{Type: s.Type, Name: s.Name}
			}
		}
	}
	return f
}

// RejectedFindings records an input that was not audited.
func RejectedFindings(e Entry) Findings {
	return Findings{Source: e.Source, TraceID: e.TraceID, Rejected: e.Problems}
}

// stepLabel is "step 3 (tool_call http_post)".
func (f Findings) stepLabel(id string) string {
	s, ok := f.Steps[id]
	if !ok {
		return "step " + id
	}
	return strings.TrimSpace(fmt.Sprintf("step %s (%s %s)", id, s.Type, s.Name))
}

// JUnit XML, as Jenkins, GitLab and GitHub Actions' reporters read it: a
// test suite per trace, a test case per rule of the policy, a failure per
// violation and an error per rule that could not be evaluated. An input
// that was rejected is a suite with one erroring case.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Properties *junitPropertys `xml:"properties,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitPropertys struct {
	List []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string         `xml:"name,attr"`
	Classname string         `xml:"classname,attr"`
	Errors    []junitProblem `xml:"error"`
	Failures  []junitProblem `xml:"failure"`
}

type junitProblem struct {
	Type    string `xml:"type,attr,omitempty"`
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// JUnit renders findings against policy p as JUnit XML.
func JUnit(p *policy.Policy, all []Findings) ([]byte, error) {
	doc := junitSuites{Name: "troy " + p.PolicyID}
	for _, f := range all {
		name := f.TraceID
		if name == "" {
			name = f.Source
		}
		suite := junitSuite{Name: name, Properties: &junitPropertys{List: []junitProperty{
			{Name: "source", Value: f.Source}, {Name: "policy_id", Value: p.PolicyID}, {Name: "policy_hash", Value: p.Hash()}}}}
		if len(f.Rejected) > 0 {
			suite.Cases = []junitCase{{Name: "trace is valid", Classname: "troy.input", Errors: []junitProblem{{
				Type: "rejected", Message: "not audited: " + firstOr(f.Rejected, "rejected"), Body: strings.Join(f.Rejected, "\n")}}}}
			suite.Tests, suite.Errors = 1, 1
		} else {
			suite.Properties.List = append(suite.Properties.List, junitProperty{Name: "agent_name", Value: f.AgentName},
				junitProperty{Name: "risk_score", Value: strconv.Itoa(f.RiskScore)})
			for _, r := range p.Rules {
				c := junitCase{Name: r.RuleID, Classname: "troy." + p.PolicyID}
				for _, v := range f.Violations {
					if v.RuleID == r.RuleID {
						c.Failures = append(c.Failures, junitProblem{Type: v.Severity,
							Message: fmt.Sprintf("%s at %s", v.Description, f.stepLabel(v.StepID)),
							Body:    fmt.Sprintf("rule %s (%s) fired at %s of trace %s (%s)", v.RuleID, v.Severity, f.stepLabel(v.StepID), f.TraceID, f.Source)})
					}
				}
				for _, e := range f.RuleErrors {
					if e.RuleID == r.RuleID {
						c.Errors = append(c.Errors, junitProblem{Type: "rule_error",
							Message: fmt.Sprintf("could not evaluate at %s: %s", f.stepLabel(e.StepID), e.Error)})
					}
				}
				if len(c.Failures) > 0 {
					suite.Failures++
				} else if len(c.Errors) > 0 {
					suite.Errors++
				}
				suite.Cases = append(suite.Cases, c)
			}
			suite.Tests = len(suite.Cases)
		}
		doc.Tests += suite.Tests
		doc.Failures += suite.Failures
		doc.Errors += suite.Errors
		doc.Suites = append(doc.Suites, suite)
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("junit: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}
