package bus

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClientConfig says how to reach a NATS server or cluster.
type ClientConfig struct {
	URL       string // nats://host:4222[,nats://…]
	Creds     string // .creds file
	TLSCA     string
	TLSCert   string
	TLSKey    string
	Name      string // connection name shown by the server
	Timeout   time.Duration
	Reconnect bool // keep retrying when the server goes away
	// WaitForServer keeps trying the first connection too (services that
	// may start before their server); commands fail at once instead.
	WaitForServer bool
	// Password of the user the URL names (nats://USER@host), kept out of
	// the URL so it shows in no process list (TROY_NATS_PASSWORD).
	Password string
}

// Validate checks the configuration.
func (c ClientConfig) Validate() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("NATS TLS: give both --nats-tls-cert and --nats-tls-key, or neither")
	}
	if c.Password != "" {
		if urlUser(c.URL) == "" {
			return fmt.Errorf("a NATS password is set (TROY_NATS_PASSWORD) but %s names no user: use nats://USER@host:4222", RedactURL(c.URL))
		}
		for _, p := range strings.Split(c.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
				if _, has := u.User.Password(); has {
					return errors.New("the NATS password is given twice, in the URL and in TROY_NATS_PASSWORD: keep it out of the URL")
				}
			}
		}
	}
	return nil
}

// Connect dials the configured server.
func Connect(cfg ClientConfig) (*nats.Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := Options(cfg)
	dial := cfg.URL
	if cfg.Password != "" {
		opts = append(opts, nats.UserInfo(urlUser(cfg.URL), cfg.Password))
		dial = withoutUser(cfg.URL)
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	nc, err := nats.Connect(dial, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			return nil, noServer{url: RedactURL(cfg.URL), err: err}
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(cfg.URL), err)
	}
	return nc, nil
}

// noServer is a connection refused because nothing listens at the URL;
// it matches nats.ErrNoServers.
type noServer struct {
	url string
	err error
}

func (e noServer) Error() string {
	return "nothing answers at " + e.url + ": is troy serve (or the NATS server) running? check --nats-url / NATS_URL"
}

func (e noServer) Unwrap() error { return e.err }

// Options are the connection options troy's clients use (name, timeout,
// reconnects) for cfg.
func Options(cfg ClientConfig) []nats.Option {
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	name := cfg.Name
	if name == "" {
		name = "troy"
	}
	opts := []nats.Option{nats.Name(name), nats.Timeout(timeout)}
	if user := urlUser(cfg.URL); user != "" {
		// replies come to this user's own inboxes, which its permissions
		// let it read; other users' replies stay theirs
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(user)))
	}
	if cfg.Reconnect {
		opts = append(opts, nats.MaxReconnects(-1))
	}
	if cfg.WaitForServer {
		opts = append(opts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	}
	return opts
}

// RedactURL is a server list fit for logs and errors: passwords replaced
// by xxxxx.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// IsInbox reports whether a request's reply subject is a requester's
// inbox. A service answers only there: a requester may name any reply
// subject, and a responder's permission to answer would otherwise let it
// publish the answer onto a stream (a ledger, the findings, a bucket).
func IsInbox(reply string) bool {
	return strings.HasPrefix(reply, "_INBOX.") || strings.HasPrefix(reply, "_INBOX_")
}

// InboxPrefix is where a user's replies come (deploy configs let each
// user subscribe to its own).
func InboxPrefix(user string) string { return "_INBOX_" + user }

// withoutUser drops the user from each server URL (nats.go would take a
// user without a password for a token).
func withoutUser(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// urlUser is the user named in the first server URL, "" when none.
func urlUser(urls string) string {
	first, _, _ := strings.Cut(urls, ",")
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil || u.User == nil {
		return ""
	}
	name := u.User.Username()
	if name == "" || strings.ContainsAny(name, ".*> \t") {
		return ""
	}
	return name
}

// JetStream returns the JetStream API of a connection.
func JetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	// An async publish whose ack never comes (a lost reply during a
	// reconnect) fails after this instead of leaving its waiter blocked.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// IsPermissionDenied reports whether the server refused an operation to
// this connection's user.
func IsPermissionDenied(err error) bool {
	return err != nil && (errors.Is(err, nats.ErrPermissionViolation) ||
		strings.Contains(strings.ToLower(err.Error()), "permissions violation"))
}

// Refused turns a publish that timed out into the server's refusal when
// that is why: a publish the user may not make gets no answer, only an
// asynchronous error on the connection, so without this the caller would
// report a timeout. subject is (a prefix of) the subject published.
func Refused(nc *nats.Conn, err error, subject string) error {
	if err == nil || IsPermissionDenied(err) || nc == nil {
		return err
	}
	last := nc.LastError()
	if IsPermissionDenied(last) && strings.Contains(last.Error(), `Publish to "`+subject) {
		return fmt.Errorf("%w (%w)", last, err)
	}
	return err
}
