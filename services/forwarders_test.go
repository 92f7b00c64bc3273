package services_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/bus"
	"github.com/troy-audit/troy/pkg/bus/bustest"
	"github.com/troy-audit/troy/pkg/ocsf"
	"github.com/troy-audit/troy/pkg/policy"
	"github.com/troy-audit/troy/pkg/trace"
	"github.com/troy-audit/troy/services/splunk"
	"github.com/troy-audit/troy/services/syslog"
)

// publishFindings puts n findings on the violations stream.
func publishFindings(t *testing.T, srv *bustest.Server, n int) {
	t.Helper()
	tr := &trace.Trace{TraceID: "fw", AgentName: "bot", Steps: []*trace.Step{{StepID: "s", Type: "tool_call"}}}
	for i := range n {
		v := policy.Violation{RuleID: "rule", StepID: "s", Severity: "high", Weight: 1, Description: "d"}
		uid := fmt.Sprintf("uid-%04d", i)
		b, err := json.Marshal(ocsf.FromViolation(v, uid, ocsf.Context{Trace: tr, Now: time.Now()}))
		require.NoError(t, err)
		require.NoError(t, bus.Publish(context.Background(), srv.JS, bus.Out{Subject: ocsf.Subject("high", "rule"), Data: b, MsgID: uid}))
	}
}

// Splunk is down for the first attempts: the forwarder keeps its batch and
// every finding arrives, once, in batches of at most the configured size.
func TestSplunkForwarderLosesNothingWhileSplunkIsDown(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	var mu sync.Mutex
	got := map[string]int{}
	requests, biggest := 0, 0
	hec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if r.Header.Get("Authorization") != "Splunk hec-token" || r.URL.Path != "/services/collector/event" {
			http.Error(w, `{"text":"Invalid token","code":4}`, http.StatusForbidden)
			return
		}
		if requests <= 3 {
			http.Error(w, `{"text":"Server is busy","code":9}`, http.StatusServiceUnavailable)
			return
		}
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(nil, 1<<20)
		n := 0
		for sc.Scan() {
			var e struct {
				Event ocsf.Finding `json:"event"`
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
			got[e.Event.FindingInfo.UID]++
			n++
		}
		biggest = max(biggest, n)
		fmt.Fprint(w, `{"text":"Success","code":0}`)
	}))
	defer hec.Close()

	publishFindings(t, srv, 250)
	cfg := splunk.DefaultConfig()
	cfg.URL, cfg.Token, cfg.BatchSize, cfg.FlushEvery = hec.URL, "hec-token", 100, 200*time.Millisecond
	fw, err := splunk.New(deps, cfg)
	require.NoError(t, err)
	start(t, fw)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 250
	}, 30*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for uid, n := range got {
		assert.Equal(t, 1, n, uid)
	}
	assert.LessOrEqual(t, biggest, 100)
	assert.Greater(t, requests, 3)

	_, err = splunk.New(deps, splunk.Config{URL: "splunk:8088", Token: "x", BatchSize: 1, FlushEvery: time.Second, Timeout: time.Second})
	assert.ErrorContains(t, err, "must be an http(s) URL")
}

// Syslog over TCP: octet-counted RFC 5424 frames holding CEF. The collector
// is down when the forwarder starts; it keeps redialling and, once the
// collector is up, everything arrives.
func TestSyslogForwarderOverTCP(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := probe.Addr().String()
	probe.Close() // nothing listens there yet

	publishFindings(t, srv, 10)
	cfg := syslog.DefaultConfig()
	cfg.Addr = addr
	fw, err := syslog.New(deps, cfg)
	require.NoError(t, err)
	start(t, fw)
	time.Sleep(700 * time.Millisecond) // let a few dials fail: the outage under test

	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	defer lis.Close()
	var mu sync.Mutex
	seen := map[string]bool{}
	var frames []string
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					lenStr, err := r.ReadString(' ')
					if err != nil {
						return
					}
					n, err := strconv.Atoi(strings.TrimSpace(lenStr))
					if err != nil {
						return
					}
					buf := make([]byte, n)
					if _, err := io.ReadFull(r, buf); err != nil {
						return
					}
					mu.Lock()
					frames = append(frames, string(buf))
					seen[externalID(string(buf))] = true
					mu.Unlock()
				}
			}(conn)
		}
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 10
	}, 30*time.Second, 50*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, frames, 10, "each once")
	assert.True(t, strings.HasPrefix(frames[0], "<83>1 "), frames[0])
	assert.Contains(t, frames[0], " troy-finding - CEF:0|troy|troy|")
}

func TestSyslogForwarderOverUDP(t *testing.T) {
	srv, deps := bustest.Provisioned(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	publishFindings(t, srv, 5)
	cfg := syslog.DefaultConfig()
	cfg.Addr, cfg.Network = pc.LocalAddr().String(), "udp"
	fw, err := syslog.New(deps, cfg)
	require.NoError(t, err)
	start(t, fw)
	seen := map[string]bool{}
	buf := make([]byte, 65536)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(20*time.Second)))
	for len(seen) < 5 {
		n, _, err := pc.ReadFrom(buf)
		require.NoError(t, err)
		msg := string(buf[:n])
		require.True(t, strings.HasPrefix(msg, "<83>1 "), msg)
		seen[externalID(msg)] = true
	}
	_, err = syslog.New(deps, syslog.Config{Addr: "nowhere", Network: "tcp"})
	assert.ErrorContains(t, err, "want host:port")
}

func externalID(frame string) string {
	_, after, _ := strings.Cut(frame, "externalId=")
	id, _, _ := strings.Cut(after, " ")
	return id
}
