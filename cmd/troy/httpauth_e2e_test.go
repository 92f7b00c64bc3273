package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/guard"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all PEM, into dir.
func testPKI(t *testing.T, dir string) (pool *x509.CertPool, client tls.Certificate) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	write := func(name, typ string, der []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	caKey := key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "troy test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err = x509.ParseCertificate(caDER)
	require.NoError(t, err)
	write("ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		kb, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		write(name+".pem", "CERTIFICATE", der)
		write(name+"-key.pem", "EC PRIVATE KEY", kb)
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		require.NoError(t, err)
		return pair
	}
	issue("server", 2, x509.ExtKeyUsageServerAuth)
	client = issue("client", 3, x509.ExtKeyUsageClientAuth)
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, client
}

// The HTTP API over TLS with scoped tokens: each endpoint takes its scope,
// probes stay open, and an API reachable from the network is not served
// open by accident.
func TestServeHTTPTokensAndTLS(t *testing.T) {
	dir := t.TempDir()
	token := func(name, scope string) string {
		r := troy(t, dir, "tokens", "add", name, "--scope", scope, "--file", "tokens")
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		return lines[len(lines)-1]
	}
	collector, guardian, ops := token("collector", "ingest"), token("guardian", "guard"), token("ops", "admin")
	r := troy(t, dir, "tokens", "list", "--file", "tokens")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "collector")
	assert.NotContains(t, r.stdout, collector)

	r = troy(t, dir, "serve", "--http-addr", "0.0.0.0:0", "--nats-addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "refused"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "reachable from the network and no tokens are set")

	pool, clientCert := testPKI(t, dir)
	_, base := startServe(t, dir, "--http-tokens", "tokens", "--tls-cert", "server.pem", "--tls-key", "server-key.pem")
	require.True(t, strings.HasPrefix(base, "https://"), base)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	call := func(method, path, tok, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, call("GET", "/healthz", "", ""), "probes stay open")
	assert.Equal(t, http.StatusOK, call("GET", "/readyz", "", ""))
	assert.Equal(t, http.StatusUnauthorized, call("GET", "/metrics", "", ""))
	assert.Equal(t, http.StatusForbidden, call("GET", "/metrics", collector, ""))
	assert.Equal(t, http.StatusOK, call("GET", "/metrics", ops, ""), "admin may do everything")
	trace := `{"trace_id": "auth-1", "agent_name": "a", "steps": [{"step_id": "1", "type": "tool_call", "name": "crm"}]}`
	assert.Equal(t, http.StatusUnauthorized, call("POST", "/v1/traces", "", trace))
	assert.Equal(t, http.StatusForbidden, call("POST", "/v1/traces", guardian, trace))
	assert.Equal(t, http.StatusAccepted, call("POST", "/v1/traces", collector, trace))
	assert.Equal(t, http.StatusForbidden, call("POST", "/v1/approvals/x", collector, `{"approved": true}`))

	// the web console: its page is open, what it shows needs read; the
	// browser signs in once and carries the token in an HttpOnly cookie
	assert.Equal(t, http.StatusOK, call("GET", "/", "", ""), "the console's page")
	assert.Equal(t, http.StatusUnauthorized, call("GET", "/console/state", "", ""))
	assert.Equal(t, http.StatusForbidden, call("GET", "/console/state", collector, ""))
	login := func(tok string) *http.Response {
		t.Helper()
		resp, err := client.Post(base+"/console/login", "application/json", strings.NewReader(`{"token": "`+tok+`"}`))
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	assert.Equal(t, http.StatusUnauthorized, login("troy_not-a-token").StatusCode)
	resp := login(ops)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	assert.True(t, c.HttpOnly && c.Secure, "HttpOnly, and Secure over TLS")
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	req, err := http.NewRequest("GET", base+"/console/state", nil)
	require.NoError(t, err)
	req.AddCookie(c)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the cookie stands for the token")

	g := &guard.HTTP{URL: base, Client: client, Token: guardian}
	d, err := g.Check(context.Background(), guard.Request{Action: guard.Action{Name: "docs_search"}})
	require.NoError(t, err)
	assert.Equal(t, guard.Allow, d.Decision)
	g = &guard.HTTP{URL: base, Client: client, Token: collector, Opts: guard.RemoteOptions{FailOpen: true}}
	d, err = g.Check(context.Background(), guard.Request{Action: guard.Action{Name: "docs_search"}})
	assert.ErrorIs(t, err, guard.ErrRefused)
	assert.Equal(t, guard.Block, d.Decision, "a refused client is blocked, even failing open")

	// A page in the operator's browser cannot post to the API (the open
	// loopback one above all): cross-origin requests that change state
	// are refused, whatever token a browser might hold.
	_, open := startServe(t, t.TempDir())
	for _, path := range []string{"/v1/traces", "/v1/approvals/x", "/v1/guard/check"} {
		req, err := http.NewRequest("POST", open+path, strings.NewReader(trace))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "https://evil.example")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site POST to %s", path)
	}

	// Mutual TLS: no client certificate, no connection.
	mdir := t.TempDir()
	for _, f := range []string{"ca.pem", "server.pem", "server-key.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(mdir, f), b, 0o600))
	}
	_, mbase := startServe(t, mdir, "--tls-cert", "server.pem", "--tls-key", "server-key.pem", "--tls-client-ca", "ca.pem")
	_, err = client.Get(mbase + "/healthz")
	assert.Error(t, err, "a client without a certificate is refused")
	mclient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}}}
	resp, err = mclient.Get(mbase + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
