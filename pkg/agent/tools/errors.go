package tools

import (
	"fmt"
	"sort"
	"strings"
)

// Code classifies a failed tool call. The set is fixed: models and people
// learn what each one means, so a new failure maps onto one of these.
type Code string

// The twelve error codes.
const (
	InvalidInput      Code = "invalid_input"
	NotFound          Code = "not_found"
	PermissionDenied  Code = "permission_denied"
	UnsafeOperation   Code = "unsafe_operation"
	PolicyViolation   Code = "policy_violation"
	SafetyFallback    Code = "safety_fallback"
	ApprovalDenied    Code = "approval_denied"
	Timeout           Code = "timeout"
	ResourceLimit     Code = "resource_limit"
	ExecutionFailed   Code = "execution_failed"
	DependencyMissing Code = "dependency_missing"
	Internal          Code = "internal"
)

// Codes lists every code, in the order the documentation gives them.
var Codes = []Code{InvalidInput, NotFound, PermissionDenied, UnsafeOperation, PolicyViolation,
	SafetyFallback, ApprovalDenied, Timeout, ResourceLimit, ExecutionFailed, DependencyMissing, Internal}

// Retryable reports whether the same call, changed, may succeed: the terminal
// codes say "change your approach", the others "fix the call".
func (c Code) Retryable() bool {
	switch c {
	case UnsafeOperation, PolicyViolation, SafetyFallback, ApprovalDenied, DependencyMissing:
		return false
	}
	return true
}

// Error is a failed call as the model and the run record see it.
type Error struct {
	Code        Code           `json:"code"`
	Message     string         `json:"message"`
	Remediation string         `json:"remediation,omitempty"`
	Retryable   bool           `json:"retryable"`
	Details     map[string]any `json:"details,omitempty"`
}

// Errorf builds an Error with the retry flag its code implies.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Retryable()}
}

// Fix sets the remediation text.
func (e *Error) Fix(remediation string) *Error { e.Remediation = remediation; return e }

// With adds a detail.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// ModelText is what the model reads for this failure.
func (e *Error) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ERROR [%s]: %s", e.Code, e.Message)
	if e.Remediation != "" {
		fmt.Fprintf(&b, "\nHow to fix: %s", e.Remediation)
	}
	if !e.Retryable {
		b.WriteString("\nDo not retry this call as-is. Change your approach.")
	}
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s: %v", k, e.Details[k])
	}
	return b.String()
}
