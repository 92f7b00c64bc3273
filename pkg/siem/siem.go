// Package siem renders OCSF findings for SIEMs: Splunk HTTP Event Collector
// events, and CEF messages in RFC 5424 syslog frames.
package siem

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/troy-audit/troy/pkg/ocsf"
)

// HECEvent is one Splunk HTTP Event Collector event.
type HECEvent struct {
	Time       float64      `json:"time"` // epoch seconds
	Host       string       `json:"host,omitempty"`
	Source     string       `json:"source"`
	Sourcetype string       `json:"sourcetype"`
	Index      string       `json:"index,omitempty"`
	Event      ocsf.Finding `json:"event"`
}

// HEC wraps a finding for Splunk; index may be empty (the token's default).
func HEC(f ocsf.Finding, index string) HECEvent {
	host, _ := os.Hostname()
	return HECEvent{Time: float64(f.Time) / 1000, Host: host, Source: "troy", Sourcetype: "ocsf:detection_finding", Index: index, Event: f}
}

// HECBatch renders events the way /services/collector/event takes a batch:
// one JSON object after another.
func HECBatch(events []HECEvent) ([]byte, error) {
	var b strings.Builder
	for _, e := range events {
		j, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// CEF severities (0–10) for OCSF's severity_id.
var cefSeverity = map[int]int{1: 1, 2: 3, 3: 5, 4: 8, 5: 10, 6: 10}

// CEF renders a finding as an ArcSight CEF:0 message.
func CEF(f ocsf.Finding) string {
	ext := []string{
		"rt=" + fmt.Sprint(f.Time),
		"externalId=" + cefValue(f.FindingInfo.UID),
		"msg=" + cefValue(f.FindingInfo.Desc),
		"cs1Label=trace_id", "cs1=" + cefValue(fmt.Sprint(f.Unmapped["trace_id"])),
		"cs2Label=step_id", "cs2=" + cefValue(fmt.Sprint(f.Unmapped["step_id"])),
		"cs3Label=policy_hash", "cs3=" + cefValue(fmt.Sprint(f.Unmapped["policy_hash"])),
		"cs4Label=policy_id", "cs4=" + cefValue(fmt.Sprint(f.Unmapped["policy_id"])),
		"suser=" + cefValue(fmt.Sprint(f.Unmapped["agent_name"])),
		"cat=" + cefValue(f.ClassName),
	}
	return fmt.Sprintf("CEF:0|troy|troy|%s|%s|%s|%d|%s",
		cefHeader(f.Metadata.Product.Version), cefHeader(f.FindingInfo.Analytic.UID), cefHeader(f.FindingInfo.Title),
		cefSeverity[f.SeverityID], strings.Join(ext, " "))
}

// cefHeader escapes a header field (| and \).
func cefHeader(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.NewReplacer(`\`, `\\`, `|`, `\|`, "\n", " ", "\r", " ").Replace(s)
}

// cefValue escapes an extension value (\, = and newlines).
func cefValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `=`, `\=`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// Syslog severities for OCSF's severity_id: critical→crit, high→err,
// medium→warning, low→notice.
var syslogSeverity = map[int]int{1: 6, 2: 5, 3: 4, 4: 3, 5: 2, 6: 1}

// FacilitySecurity is syslog facility 10, security/authorization.
const FacilitySecurity = 10

// Syslog frames a message as RFC 5424: <PRI>1 TIMESTAMP HOST APP PROCID MSGID - MSG.
func Syslog(f ocsf.Finding, host, app string) string {
	pri := FacilitySecurity*8 + syslogSeverity[f.SeverityID]
	if host == "" {
		host = "-"
	}
	ts := time.UnixMilli(f.Time).UTC().Format("2006-01-02T15:04:05.000Z")
	return fmt.Sprintf("<%d>1 %s %s %s %d %s - %s", pri, ts, host, app, os.Getpid(), "troy-finding", CEF(f))
}
