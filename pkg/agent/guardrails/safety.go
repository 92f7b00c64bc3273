package guardrails

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Content-safety categories.
const (
	HarmfulIntent   = "harmful_intent"
	PolicyViolation = "policy_violation"
	Bias            = "bias"
	UnsafeBehavior  = "unsafe_behavior"
)

// Content-safety dispositions: what a flagged category does.
const (
	Escalate = "escalate" // raise the tier (DANGER; WARNING for bias)
	Fallback = "fallback" // refuse, steering to a safer path; no human is asked
	Block    = "block"    // refuse outright; no human is asked
)

// SafetyVerdict is a classifier's judgement of a text.
type SafetyVerdict struct {
	Flagged    bool
	Categories []string
	Severity   Severity
	Reason     string
}

// SafetyProvider classifies text.
type SafetyProvider interface {
	Classify(ctx context.Context, text string) (SafetyVerdict, error)
}

// ContentSafety screens arguments and results with a provider.
type ContentSafety struct {
	Provider SafetyProvider
	// Dispositions override the defaults: harmful_intent and
	// unsafe_behavior escalate to DANGER, policy_violation falls back,
	// bias escalates to WARNING, anything else escalates to DANGER.
	Dispositions map[string]string
	// FailClosed blocks when the provider fails (default: note it, go on).
	FailClosed bool
}

// MaxSafetyText bounds the text a provider reads.
const MaxSafetyText = 6000

func (c *ContentSafety) disposition(category string) string {
	if d, ok := c.Dispositions[category]; ok {
		return d
	}
	if category == PolicyViolation {
		return Fallback
	}
	return Escalate
}

// scan classifies text and turns the verdict into findings (SAF:<category>).
func (c *ContentSafety) scan(ctx context.Context, text, source string) []Finding {
	if c == nil || c.Provider == nil || strings.TrimSpace(text) == "" {
		return nil
	}
	v, err := c.Provider.Classify(ctx, clip(text, MaxSafetyText))
	if err != nil {
		f := Finding{RuleID: "SAF000", Severity: Info, Source: source, Message: "content safety could not judge: " + err.Error()}
		if c.FailClosed {
			f.Severity, f.Block = Critical, true
		}
		return []Finding{f}
	}
	if !v.Flagged {
		return nil
	}
	var out []Finding
	for _, cat := range v.Categories {
		f := Finding{RuleID: "SAF:" + cat, Severity: v.Severity, Source: source, Message: fmt.Sprintf("content safety: %s (%s)", cat, v.Reason)}
		if f.Severity == "" {
			f.Severity = Warn
		}
		switch c.disposition(cat) {
		case Block:
			f.Block = true
		case Fallback:
			f.Fallback = true
			f.EscalateTo = tierPtr(Danger)
		default:
			if cat == Bias {
				f.EscalateTo = tierPtr(Warning)
			} else {
				f.EscalateTo = tierPtr(Danger)
			}
		}
		out = append(out, f)
	}
	return out
}

// KeywordSafety is a small, offline classifier by phrases. It catches the
// obvious and misses paraphrase, other languages and encodings: a floor,
// not a judge. It has no bias phrases on purpose (words alone cannot tell).
type KeywordSafety struct{}

var safetyPhrases = map[string]*regexp.Regexp{
	HarmfulIntent:   regexp.MustCompile(`(?i)\b(?:make|build|assemble|synthesi[sz]e)\s+(?:a\s+|an\s+)?(?:pipe\s+)?(?:bomb|explosive|nerve\s+agent|bioweapon|chemical\s+weapon)s?\b|\bhow\s+to\s+(?:poison|kill|hurt)\s+(?:a\s+)?(?:person|someone|people|him|her|them)\b`),
	UnsafeBehavior:  regexp.MustCompile(`(?i)\b(?:disable|bypass|turn\s+off|evade|tamper\s+with)\s+(?:the\s+)?(?:safety|security|antivirus|firewall|audit(?:ing)?|logging|monitoring|guardrails?)\b`),
	PolicyViolation: regexp.MustCompile(`(?i)\b(?:share|leak|publish|post|sell)\s+(?:the\s+|our\s+|all\s+)?(?:customer|client|patient|employee|user)s?'?\s+(?:list|records|data|details)\s+(?:publicly|online|externally|on\s+social\s+media)\b`),
}

// Classify implements SafetyProvider.
func (KeywordSafety) Classify(_ context.Context, text string) (SafetyVerdict, error) {
	var cats, hits []string
	for cat, re := range safetyPhrases {
		if m := re.FindString(text); m != "" {
			cats = append(cats, cat)
			hits = append(hits, fmt.Sprintf("%q", m))
		}
	}
	if len(cats) == 0 {
		return SafetyVerdict{}, nil
	}
	sort.Strings(cats)
	sort.Strings(hits)
	return SafetyVerdict{Flagged: true, Categories: cats, Severity: Critical, Reason: "matched " + strings.Join(hits, ", ")}, nil
}
