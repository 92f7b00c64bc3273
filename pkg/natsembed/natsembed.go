// Package natsembed runs nats-server with JetStream inside the troy process
// (troy serve and the CLI with no --nats-url, and tests). It is the only
// package that links the server: libraries and the Go SDK use pkg/bus, the
// client side, alone.
package natsembed

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/troy-audit/troy/pkg/bus"
)

// Config configures the in-process NATS server.
type Config struct {
	StoreDir string // JetStream store; a lock inside keeps two processes apart
	Listen   string // host:port for outside clients; "" accepts in-process clients only
	// MaxPayload bounds one message; traces, graphs and reports travel whole.
	MaxPayload int32
	// MaxStore bounds the JetStream store on disk (0: the disk's size). Past
	// it, publishes are refused with "insufficient resources", as on a
	// full disk.
	MaxStore int64
	// AuthFile, when set, is a nats-server authorization block (troy
	// nats-config's auth.conf): outside clients must log in as its users.
	// This process's own services log in as an internal user whose
	// password never leaves it.
	AuthFile string
}

// DefaultMaxPayload fits a 4 MiB trace with its graph and explanations.
const DefaultMaxPayload = 16 << 20

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.StoreDir == "" {
		return errors.New("embedded NATS: a store directory is required (--data-dir or TROY_DATA_DIR)")
	}
	if c.Listen != "" {
		if _, _, err := splitHostPort(c.Listen); err != nil {
			return fmt.Errorf("embedded NATS: --nats-addr %q: %w (want host:port, e.g. 127.0.0.1:4222)", c.Listen, err)
		}
	}
	return nil
}

// Server is a running in-process NATS server with JetStream.
type Server struct {
	Server   *server.Server
	lock     *os.File
	internal string // the in-process services' password ("" without AuthFile)
}

// internalUser is who this process's own services are.
const internalUser = "troy-internal"

// ErrStoreLocked is returned when another process uses the store directory.
var ErrStoreLocked = errors.New("store directory in use")

// Start starts nats-server with JetStream and waits until it accepts
// connections.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded NATS: create store %s: %w", cfg.StoreDir, err)
	}
	lock, err := lockDir(cfg.StoreDir)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "troy-embedded",
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	var internal string
	if cfg.AuthFile != "" {
		auth := &server.Options{}
		if err := auth.ProcessConfigFile(cfg.AuthFile); err != nil {
			lock.Close()
			return nil, fmt.Errorf("embedded NATS: --nats-auth %s: %w", cfg.AuthFile, err)
		}
		if len(auth.Users) == 0 {
			lock.Close()
			return nil, fmt.Errorf("embedded NATS: --nats-auth %s has no users (troy nats-config writes them)", cfg.AuthFile)
		}
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			lock.Close()
			return nil, err
		}
		internal = base64.RawURLEncoding.EncodeToString(raw)
		opts.Users = append(auth.Users, &server.User{Username: internalUser, Password: internal})
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, _ := splitHostPort(cfg.Listen)
		if port == 0 {
			port = server.RANDOM_PORT // nats-server reads 0 as "the default, 4222"
		} else if l, err := net.Listen("tcp", cfg.Listen); err != nil {
			// said now: nats-server would only fail to become ready
			lock.Close()
			return nil, fmt.Errorf("embedded NATS: cannot listen on %s (%v): another troy serve or NATS server may hold it; give --nats-addr another address", cfg.Listen, err)
		} else {
			l.Close()
		}
		opts.Host, opts.Port = host, port
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		lock.Close()
		if cfg.Listen != "" {
			return nil, fmt.Errorf("embedded NATS did not start: is %s already in use? pick another with --nats-addr", cfg.Listen)
		}
		return nil, errors.New("embedded NATS did not start within 30s")
	}
	return &Server{Server: ns, lock: lock, internal: internal}, nil
}

// ClientURL is the address outside clients connect to ("" when not listening).
func (e *Server) ClientURL() string {
	if e.Server.Addr() == nil {
		return ""
	}
	return e.Server.ClientURL()
}

// Shutdown stops the server, waiting for it to flush its store.
func (e *Server) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	e.lock.Close()
}

// Connect opens an in-process connection to the server.
func (e *Server) Connect(name string) (*nats.Conn, error) {
	opts := append(bus.Options(bus.ClientConfig{Name: name}), nats.InProcessServer(e.Server))
	if e.internal != "" {
		opts = append(opts, nats.UserInfo(internalUser, e.internal))
	}
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded NATS: %w", err)
	}
	return nc, nil
}

// InUse says whether a running embedded server holds the store in dir.
func InUse(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "troy.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "troy.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: another troy process is using %s; wait for it, give this one its own --data-dir, or point both at a NATS server with --nats-url", ErrStoreLocked, dir)
	}
	return f, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}
