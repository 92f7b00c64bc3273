package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troy-audit/troy/pkg/httpauth"
)

// defaultTokensFile is where troy tokens add writes and troy serve looks
// when --http-tokens is not given.
const defaultTokensFile = ".troy/http-tokens"

// httpSecurity is serve's HTTP authentication and TLS.
type httpSecurity struct {
	tokensFile   string
	insecure     bool
	cert, key    string
	clientCA     string
	tokens       *httpauth.Tokens // nil: no authentication
	tls          *tls.Config      // nil: plain HTTP
	tokensSource string           // what the banner says
}

func (h *httpSecurity) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&h.tokensFile, "http-tokens", os.Getenv("TROY_HTTP_TOKENS"),
		"bearer tokens the HTTP API accepts, with their scopes (troy tokens add; env TROY_HTTP_TOKENS; default "+defaultTokensFile+" when it exists)")
	fl.BoolVar(&h.insecure, "insecure-no-auth", false, "serve the HTTP API without tokens on a non-loopback --http-addr, and the embedded NATS port without users on a non-loopback --nats-addr (anyone who reaches them may send traces, ask the guard, decide approvals, replace policies)")
	fl.StringVar(&h.cert, "tls-cert", os.Getenv("TROY_TLS_CERT"), "serve HTTPS with this certificate (PEM; env TROY_TLS_CERT)")
	fl.StringVar(&h.key, "tls-key", os.Getenv("TROY_TLS_KEY"), "and this private key (PEM; env TROY_TLS_KEY)")
	fl.StringVar(&h.clientCA, "tls-client-ca", os.Getenv("TROY_TLS_CLIENT_CA"), "require client certificates signed by this CA (mutual TLS; PEM; env TROY_TLS_CLIENT_CA)")
}

// resolve loads the tokens and certificates and refuses an API open to
// the network by accident.
func (h *httpSecurity) resolve(httpAddr string) error {
	file := h.tokensFile
	if file == "" {
		if _, err := os.Stat(defaultTokensFile); err == nil {
			file = defaultTokensFile
		}
	}
	if file != "" {
		ts, err := httpauth.Load(file)
		if err != nil {
			return fmt.Errorf("--http-tokens: %w", err)
		}
		h.tokens, h.tokensSource = ts, fmt.Sprintf("%s from %s", plural(ts.Len(), "token", "tokens"), file)
	}
	if h.tokens == nil {
		if !isLoopback(httpAddr) && !h.insecure {
			return fmt.Errorf("--http-addr %s is reachable from the network and no tokens are set: give --http-tokens FILE (troy tokens add NAME --scope S), "+
				"bind 127.0.0.1, or pass --insecure-no-auth to serve it open anyway", httpAddr)
		}
		h.tokensSource = "none (open: loopback only)"
		if h.insecure {
			h.tokensSource = "none (--insecure-no-auth)"
		}
	}
	if (h.cert == "") != (h.key == "") {
		return errors.New("give both --tls-cert and --tls-key, or neither")
	}
	if h.clientCA != "" && h.cert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first")
	}
	if h.cert != "" {
		pair, err := tls.LoadX509KeyPair(h.cert, h.key)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		h.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		if h.clientCA != "" {
			pem, err := os.ReadFile(h.clientCA)
			if err != nil {
				return fmt.Errorf("--tls-client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", h.clientCA)
			}
			h.tls.ClientCAs, h.tls.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	return nil
}

// isLoopback reports whether a listen address is reachable only from this
// host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
