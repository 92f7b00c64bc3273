// Package ocsf renders troy's policy violations as OCSF 1.8.0 Detection
// Findings (class 2004), the shape SIEMs ingest.
package ocsf

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
)

// Schema constants of a Detection Finding being created.
const (
	Version         = "1.8.0"
	ClassUID        = 2004
	CategoryUID     = 2 // Findings
	ActivityCreate  = 1
	TypeUID         = ClassUID*100 + ActivityCreate
	AnalyticRule    = 1 // analytic type_id: Rule
	StatusNew       = 1
	EvidenceSubject = "troy trace step"
)

// Finding is an OCSF Detection Finding.
type Finding struct {
	ActivityID   int            `json:"activity_id"`
	ActivityName string         `json:"activity_name"`
	CategoryUID  int            `json:"category_uid"`
	CategoryName string         `json:"category_name"`
	ClassUID     int            `json:"class_uid"`
	ClassName    string         `json:"class_name"`
	TypeUID      int            `json:"type_uid"`
	TypeName     string         `json:"type_name"`
	SeverityID   int            `json:"severity_id"`
	Severity     string         `json:"severity"`
	StatusID     int            `json:"status_id"`
	Status       string         `json:"status"`
	Time         int64          `json:"time"` // epoch milliseconds
	Message      string         `json:"message"`
	FindingInfo  FindingInfo    `json:"finding_info"`
	Metadata     Metadata       `json:"metadata"`
	Evidences    []Evidence     `json:"evidences"`
	RiskScore    int            `json:"risk_score"`
	Unmapped     map[string]any `json:"unmapped"`
}

// FindingInfo identifies the finding and the analytic (rule) behind it.
type FindingInfo struct {
	UID         string   `json:"uid"`
	Title       string   `json:"title"`
	Desc        string   `json:"desc,omitempty"`
	Types       []string `json:"types"`
	CreatedTime int64    `json:"created_time"`
	Analytic    Analytic `json:"analytic"`
}

// Analytic is the rule that fired.
type Analytic struct {
	UID    string `json:"uid"`
	Name   string `json:"name"`
	Desc   string `json:"desc,omitempty"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type"`
}

// Metadata names the product and schema version.
type Metadata struct {
	Version string  `json:"version"`
	Product Product `json:"product"`
	UID     string  `json:"uid"`
	LogName string  `json:"log_name"`
}

// Product is troy.
type Product struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version,omitempty"`
}

// Evidence carries the step that violated the rule.
type Evidence struct {
	Data map[string]any `json:"data"`
}

var severityIDs = map[string]int{policy.SeverityLow: 2, policy.SeverityMedium: 3, policy.SeverityHigh: 4, policy.SeverityCritical: 5}

// SeverityID maps troy's severities to OCSF's severity_id (2 low … 5 critical).
func SeverityID(s string) int { return severityIDs[s] }

// Context is what a finding says about where the violation happened.
type Context struct {
	Trace      *trace.Trace
	PolicyID   string
	PolicyHash string
	Run        string
	Product    string // troy's version
	Now        time.Time
}

// UID is a violation's stable id: the same trace, step, rule and policy
// version always give the same finding uid (and so one finding).
func UID(traceKey, stepID, ruleID, policyHash string) string {
	sum := sha256.Sum256([]byte(traceKey + "\x00" + stepID + "\x00" + ruleID + "\x00" + policyHash))
	return "troy-" + hex.EncodeToString(sum[:16])
}

// FromViolation renders one violation.
func FromViolation(v policy.Violation, uid string, c Context) Finding {
	ms := c.Now.UnixMilli()
	step := c.Trace.Steps[v.StepIndex]
	title := v.RuleID
	if v.Description != "" {
		title += ": " + v.Description
	}
	return Finding{
		ActivityID: ActivityCreate, ActivityName: "Create",
		CategoryUID: CategoryUID, CategoryName: "Findings",
		ClassUID: ClassUID, ClassName: "Detection Finding",
		TypeUID: TypeUID, TypeName: "Detection Finding: Create",
		SeverityID: SeverityID(v.Severity), Severity: capitalize(v.Severity),
		StatusID: StatusNew, Status: "New",
		Time:    ms,
		Message: title,
		FindingInfo: FindingInfo{
			UID: uid, Title: title, Desc: v.Description, Types: []string{"AI agent policy violation"}, CreatedTime: ms,
			Analytic: Analytic{UID: v.RuleID, Name: v.RuleID, Desc: v.Description, TypeID: AnalyticRule, Type: "Rule"},
		},
		Metadata: Metadata{Version: Version, Product: Product{Name: "troy", VendorName: "troy", Version: c.Product},
			UID: uid, LogName: "troy.violations"},
		Evidences: []Evidence{{Data: map[string]any{
			"trace_id": c.Trace.TraceID, "step_id": step.StepID, "step_index": v.StepIndex,
			"step_type": step.Type, "step_name": step.Name, "agent_name": c.Trace.AgentName,
		}}},
		RiskScore: v.Weight,
		Unmapped: map[string]any{"trace_id": c.Trace.TraceID, "step_id": step.StepID, "agent_name": c.Trace.AgentName,
			"policy_id": c.PolicyID, "policy_hash": c.PolicyHash, "run": c.Run, "rule_id": v.RuleID},
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// SubjectToken makes a rule id usable as one NATS subject token.
func SubjectToken(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}

// Subject is troy.violations.<severity>.<rule_id>.
func Subject(severity, ruleID string) string {
	return "troy.violations." + severity + "." + SubjectToken(ruleID)
}
