package report

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/troy-audit/troy/pkg/policy"
)

// SARIF 2.1.0, for code-scanning dashboards: the policy's rules as the
// tool's rules, a result per violation located at its trace file (and the
// line where its step starts, when the file can be read), a notification
// per rule that could not be evaluated and per input that was rejected.

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool        sarifTool         `json:"tool"`
	Invocations []sarifInvocation `json:"invocations"`
	Results     []sarifResult     `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri,omitempty"`
	Version        string      `json:"version,omitempty"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID                   string         `json:"id"`
	ShortDescription     sarifText      `json:"shortDescription"`
	DefaultConfiguration sarifLevel     `json:"defaultConfiguration"`
	Properties           map[string]any `json:"properties,omitempty"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifLevel struct {
	Level string `json:"level"`
}

type sarifInvocation struct {
	ExecutionSuccessful bool                `json:"executionSuccessful"`
	Notifications       []sarifNotification `json:"toolExecutionNotifications,omitempty"`
}

type sarifNotification struct {
	Level      string          `json:"level"`
	Message    sarifText       `json:"message"`
	Locations  []sarifLocation `json:"locations,omitempty"`
	Descriptor *sarifRef       `json:"associatedRule,omitempty"`
}

type sarifRef struct {
	ID string `json:"id"`
}

type sarifResult struct {
	RuleID              string            `json:"ruleId"`
	Level               string            `json:"level"`
	Message             sarifText         `json:"message"`
	Locations           []sarifLocation   `json:"locations"`
	PartialFingerprints map[string]string `json:"partialFingerprints"`
	Properties          map[string]any    `json:"properties,omitempty"`
}

type sarifLocation struct {
	Physical *sarifPhysical `json:"physicalLocation,omitempty"`
	Logical  []sarifLogical `json:"logicalLocations,omitempty"`
	Message  *sarifText     `json:"message,omitempty"`
}

type sarifPhysical struct {
	Artifact sarifArtifact   `json:"artifactLocation"`
	Region   *sarifRegionRef `json:"region,omitempty"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
}

type sarifRegionRef struct {
	StartLine int `json:"startLine"`
}

type sarifLogical struct {
	Name               string `json:"name"`
	FullyQualifiedName string `json:"fullyQualifiedName,omitempty"`
	Kind               string `json:"kind,omitempty"`
}

// SARIFOptions says where the inputs are: Root is the folder the trace
// files' URIs are relative to, and Read (optional) returns a file's bytes
// so a result can point at the line of its step.
type SARIFOptions struct {
	Root    string
	Read    func(source string) ([]byte, error)
	Version string // troy's version, for the tool
}

// SARIF renders findings against policy p as a SARIF 2.1.0 log.
func SARIF(p *policy.Policy, all []Findings, opt SARIFOptions) ([]byte, error) {
	driver := sarifDriver{Name: "troy", InformationURI: "https://github.com/troy-audit/troy", Version: opt.Version}
	for _, r := range p.Rules {
		props := map[string]any{"severity": r.Severity, "policy_id": p.PolicyID}
		if len(r.Controls) > 0 {
			props["tags"] = r.Controls
		}
		desc := r.Description
		if desc == "" {
			desc = r.RuleID
		}
		driver.Rules = append(driver.Rules, sarifRule{ID: r.RuleID, ShortDescription: sarifText{desc},
			DefaultConfiguration: sarifLevel{sarifLevelOf(r.Severity)}, Properties: props})
	}
	run := sarifRun{Tool: sarifTool{driver}, Results: []sarifResult{}}
	inv := sarifInvocation{ExecutionSuccessful: true}
	for _, f := range all {
		// where the trace's steps are: a .jsonl line is the trace's line;
		// in a file of its own, the line of each step (best effort: a
		// result without a line is still a result)
		var data []byte
		line := jsonlLine(f.Source)
		if line == 0 && opt.Read != nil {
			data, _ = opt.Read(f.Source)
		}
		at := func(stepID string) *sarifRegionRef {
			if line > 0 {
				return &sarifRegionRef{StartLine: line}
			}
			return stepLine(data, stepID)
		}
		file := sarifArtifact{URI: sarifURI(opt.Root, f.Source)}
		if len(f.Rejected) > 0 {
			inv.ExecutionSuccessful = false
			inv.Notifications = append(inv.Notifications, sarifNotification{Level: "error",
				Message:   sarifText{fmt.Sprintf("%s was not audited: %s", f.Source, strings.Join(f.Rejected, "; "))},
				Locations: []sarifLocation{{Physical: &sarifPhysical{Artifact: file}}}})
			continue
		}
		for _, v := range f.Violations {
			loc := sarifLocation{Physical: &sarifPhysical{Artifact: file, Region: at(v.StepID)},
				Logical: []sarifLogical{{Name: v.StepID, FullyQualifiedName: f.TraceID + "/" + v.StepID, Kind: "element"}}}
			fp := sha256.Sum256([]byte(f.TraceID + "\x00" + v.RuleID + "\x00" + v.StepID))
			run.Results = append(run.Results, sarifResult{RuleID: v.RuleID, Level: sarifLevelOf(v.Severity),
				Message:             sarifText{fmt.Sprintf("%s at %s of trace %s (agent %s)", v.Description, f.stepLabel(v.StepID), f.TraceID, f.AgentName)},
				Locations:           []sarifLocation{loc},
				PartialFingerprints: map[string]string{"troyFinding/v1": hex.EncodeToString(fp[:16])},
				Properties:          map[string]any{"severity": v.Severity, "trace_id": f.TraceID, "step_id": v.StepID, "risk_score": f.RiskScore}})
		}
		for _, e := range f.RuleErrors {
			inv.Notifications = append(inv.Notifications, sarifNotification{Level: "warning",
				Message:    sarifText{fmt.Sprintf("rule %s could not be evaluated at %s of trace %s: %s", e.RuleID, f.stepLabel(e.StepID), f.TraceID, e.Error)},
				Locations:  []sarifLocation{{Physical: &sarifPhysical{Artifact: file, Region: at(e.StepID)}}},
				Descriptor: &sarifRef{ID: e.RuleID}})
		}
	}
	run.Invocations = []sarifInvocation{inv}
	b, err := json.MarshalIndent(sarifLog{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sarif: %w", err)
	}
	return append(b, '\n'), nil
}

// sarifLevelOf maps a severity to a SARIF level.
func sarifLevelOf(severity string) string {
	switch severity {
	case "critical", "high":
		return "error"
	case "low":
		return "note"
	default:
		return "warning"
	}
}

// jsonlLine is N of a "file.jsonl:N" source, 0 for any other.
func jsonlLine(source string) int {
	i := strings.LastIndexByte(source, ':')
	if i < 0 || !strings.HasSuffix(source[:i], ".jsonl") {
		return 0
	}
	n, err := strconv.Atoi(source[i+1:])
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// sarifURI is a source's path relative to root, with forward slashes
// (file:line of a .jsonl input keeps only the file).
func sarifURI(root, source string) string {
	file := source
	if i := strings.LastIndexByte(source, ':'); i > 0 && strings.HasSuffix(source[:i], ".jsonl") {
		file = source[:i]
	}
	if root != "" && !filepath.IsAbs(file) {
		file = filepath.Join(root, file)
	}
	file = filepath.ToSlash(filepath.Clean(file))
	if strings.HasPrefix(file, "/") {
		return (&url.URL{Scheme: "file", Path: file}).String()
	}
	return (&url.URL{Path: file}).String() // escaped: a file name may hold spaces or #
}

// stepLine finds the line where a step's id is written in its trace file:
// the first `"step_id": "<id>"` (any spacing), nil when it cannot be found.
func stepLine(data []byte, stepID string) *sarifRegionRef {
	if len(data) == 0 {
		return nil
	}
	id, _ := json.Marshal(stepID)
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(`"step_id"`))
		if j < 0 {
			return nil
		}
		k := i + j + len(`"step_id"`)
		rest := bytes.TrimLeft(data[k:], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' && bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), id) {
			return &sarifRegionRef{StartLine: 1 + bytes.Count(data[:k], []byte("\n"))}
		}
		i = k
	}
}
