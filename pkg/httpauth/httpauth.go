// Package httpauth guards troy's HTTP API with bearer tokens that carry
// scopes. Tokens are kept in a file only as SHA-256 hashes: a token is 32
// random bytes, so a fast hash is enough (there is nothing to guess), and
// the file reveals no token.
package httpauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Scopes.
const (
	Ingest  = "ingest"  // send traces and steps
	Guard   = "guard"   // ask the guard
	Read    = "read"    // metrics and reads
	Approve = "approve" // decide approvals
	Admin   = "admin"   // everything
)

// Scopes lists every scope.
var Scopes = []string{Ingest, Guard, Read, Approve, Admin}

// tokenPrefix marks troy tokens (secret scanners can find them).
const tokenPrefix = "troy_"

// Token is one entry of the tokens file.
type Token struct {
	Name   string
	Scopes []string
	hash   []byte
}

// Allows reports whether the token carries scope (admin carries all).
func (t Token) Allows(scope string) bool {
	return slices.Contains(t.Scopes, scope) || slices.Contains(t.Scopes, Admin)
}

// Tokens are the accepted tokens. Loaded from a file, they follow it: a
// token added or removed there counts from the next request a second
// later, without a restart, and a file edited into something invalid
// lets nobody in until it is fixed.
type Tokens struct {
	list []Token

	path    string
	mu      sync.Mutex
	checked time.Time // when the file was last looked at
	stamp   fileStamp // what it was then
	bad     error     // why the file as it is now cannot be used

	// OnReload, when set, hears each reload of the file: nil when its
	// tokens were taken in, else why the file cannot be used (clients are
	// then refused until it is fixed). Called with the tokens locked.
	OnReload func(n int, err error)
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// reloadEvery bounds how often a request looks at the tokens file.
const reloadEvery = time.Second

// current returns the tokens in force, reloading the file when it changed.
func (ts *Tokens) current() ([]Token, error) {
	if ts.path == "" {
		return ts.list, nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if time.Since(ts.checked) < reloadEvery {
		return ts.list, ts.bad
	}
	ts.checked = time.Now()
	st, err := os.Stat(ts.path)
	if err != nil {
		ts.bad = fmt.Errorf("tokens file: %w", err)
		return nil, ts.bad
	}
	if (fileStamp{st.ModTime(), st.Size()}) == ts.stamp && ts.bad == nil {
		return ts.list, nil
	}
	fresh, err := Load(ts.path)
	if err != nil {
		if ts.OnReload != nil && (ts.bad == nil || ts.bad.Error() != err.Error()) {
			ts.OnReload(0, err)
		}
		ts.bad = err
		return nil, err
	}
	ts.list, ts.stamp, ts.bad = fresh.list, fresh.stamp, nil
	if ts.OnReload != nil {
		ts.OnReload(len(ts.list), nil)
	}
	return ts.list, nil
}

// Len is how many tokens there are.
func (ts *Tokens) Len() int { l, _ := ts.current(); return len(l) }

// Names lists the tokens' names and scopes (never the tokens).
func (ts *Tokens) Names() []Token { l, _ := ts.current(); return slices.Clone(l) }

// Load reads a tokens file: one token a line, "NAME SCOPE[,SCOPE…]
// sha256:HEX"; blank lines and lines starting with # are skipped.
func Load(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w (make one with troy tokens add NAME --scope S --file %s)", err, path)
	}
	// whoever may write the file may let themselves in
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("tokens file %s is writable by others (%v): chmod go-w %s", path, st.Mode().Perm(), path)
	}
	ts := &Tokens{path: path, checked: time.Now()}
	if st, err := os.Stat(path); err == nil {
		ts.stamp = fileStamp{st.ModTime(), st.Size()}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w (want: NAME SCOPE[,SCOPE] sha256:HEX, as troy tokens add writes)", path, n, err)
		}
		if slices.ContainsFunc(ts.list, func(o Token) bool { return o.Name == t.Name }) {
			return nil, fmt.Errorf("%s:%d: token name %q is used twice", path, n, t.Name)
		}
		ts.list = append(ts.list, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	if len(ts.list) == 0 {
		return nil, fmt.Errorf("tokens file %s holds no token: an empty file would lock every client out (troy tokens add makes one)", path)
	}
	return ts, nil
}

func parseLine(line string) (Token, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Token{}, fmt.Errorf("%d fields", len(f))
	}
	if err := validName(f[0]); err != nil {
		return Token{}, err
	}
	scopes := strings.Split(f[1], ",")
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return Token{}, fmt.Errorf("scope %q is not one of %s", s, strings.Join(Scopes, ", "))
		}
	}
	h, ok := strings.CutPrefix(f[2], "sha256:")
	hash, err := hex.DecodeString(h)
	if !ok || err != nil || len(hash) != sha256.Size {
		return Token{}, errors.New("the hash is not sha256: and 64 hex digits")
	}
	return Token{Name: f[0], Scopes: scopes, hash: hash}, nil
}

func validName(name string) error {
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return fmt.Errorf("token name %q: use 1 to 64 letters, digits, - _ .", name)
	}
	return nil
}

// New makes a token: the secret (shown once) and its file line.
func New(name string, scopes []string) (secret, line string, err error) {
	if err := validName(name); err != nil {
		return "", "", err
	}
	if len(scopes) == 0 {
		return "", "", fmt.Errorf("give at least one scope: %s", strings.Join(Scopes, ", "))
	}
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return "", "", fmt.Errorf("scope %q is not one of %s", s, strings.Join(Scopes, ", "))
		}
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", err
	}
	secret = tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	return secret, fmt.Sprintf("%s %s sha256:%s", name, strings.Join(scopes, ","), hex.EncodeToString(sum[:])), nil
}

// Append adds a new token to the tokens file (made 0600 if new) and
// returns the secret.
func Append(path, name string, scopes []string) (string, error) {
	if old, err := os.ReadFile(path); err == nil {
		for _, l := range strings.Split(string(old), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return "", fmt.Errorf("%s already has a token named %q: pick another name (troy tokens remove %s revokes it)", path, name, name)
			}
		}
	}
	secret, line, err := New(name, scopes)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return "", err
	}
	return secret, f.Close()
}

// Remove revokes a token: its line leaves the tokens file (rewritten
// whole, keeping its mode and owner), and a troy serve following the file stops taking it within
// a second. It returns how many tokens are left.
func Remove(path, name string) (int, error) {
	// the file a link points at is the one troy serve reads
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var keep []string
	found, left := false, 0
	for _, l := range strings.Split(strings.TrimRight(string(old), "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			found = true
			continue
		}
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			left++
		}
		keep = append(keep, l)
	}
	if !found {
		return 0, fmt.Errorf("%s has no token named %q (troy tokens list shows them)", path, name)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokens-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	body := strings.Join(keep, "\n")
	if body != "" {
		body += "\n"
	}
	if _, err := tmp.WriteString(body); err != nil {
		tmp.Close()
		return 0, err
	}
	// the same mode and owner as before: troy serve may run as another user
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return 0, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, os.ErrPermission) {
			tmp.Close()
			return 0, err
		}
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return left, os.Rename(tmp.Name(), path)
}

// CookieName carries a token for the web console, whose live feed
// (EventSource) cannot send an Authorization header.
const CookieName = "troy_token"

// cookieRoute says where the console's cookie stands for a token: the
// console's own routes and the approvals it decides, not the rest of the
// API (ingest, the guard), which a browser has no business calling.
func cookieRoute(path string) bool {
	return path == "/console" || strings.HasPrefix(path, "/console/") || strings.HasPrefix(path, "/v1/approvals/")
}

// lookup finds the token a request presents: in its Authorization header,
// or else, on the console's routes, in the console's cookie.
func lookup(list []Token, r *http.Request) (Token, bool) {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && cookieRoute(r.URL.Path) {
		if c, err := r.Cookie(CookieName); err == nil {
			secret, ok = c.Value, true
		}
	}
	if !ok || secret == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	for _, t := range list {
		if subtle.ConstantTimeCompare(sum[:], t.hash) == 1 {
			return t, true
		}
	}
	return Token{}, false
}

// Require lets a request through when it carries a token with scope:
// 401 without a valid token, 403 with one that lacks the scope. A nil
// Tokens lets everything through (an API left open on purpose).
func (ts *Tokens) Require(scope string, next http.Handler) http.Handler {
	if ts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list, err := ts.current()
		if err != nil { // fail closed; the detail is the operator's (OnReload logs it), not the client's
			problem(w, http.StatusServiceUnavailable, "the server's tokens file cannot be used: its operator must fix it")
			return
		}
		t, ok := lookup(list, r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="troy"`)
			problem(w, http.StatusUnauthorized, "send a token: Authorization: Bearer <token> (troy tokens add makes one)")
			return
		}
		if !t.Allows(scope) {
			problem(w, http.StatusForbidden, fmt.Sprintf("token %q may not do this: it needs scope %q", t.Name, scope))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), nameKey{}, t.Name)))
	})
}

type nameKey struct{}

// TokenName is the name of the token a request was let in with ("" when
// the API is open): who did it, for the records.
func TokenName(ctx context.Context) string {
	n, _ := ctx.Value(nameKey{}).(string)
	return n
}

// Login takes a token posted by the web console ({"token": "…"}) and, if
// it is one of these, keeps it in an HttpOnly, same-site cookie for the
// console's requests. An open API (nil Tokens) needs none.
func (ts *Tokens) Login(secure bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ts == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&body); err != nil || body.Token == "" {
			problem(w, http.StatusBadRequest, `want {"token": "troy_…"}`)
			return
		}
		list, err := ts.current()
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "the server's tokens file cannot be used: its operator must fix it")
			return
		}
		body.Token = strings.TrimSpace(body.Token)
		probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + body.Token}}}
		if _, ok := lookup(list, probe); !ok {
			problem(w, http.StatusUnauthorized, "that is not a token this server accepts")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: body.Token, Path: "/", HttpOnly: true, Secure: secure,
			SameSite: http.SameSiteStrictMode, MaxAge: 12 * 3600})
		w.WriteHeader(http.StatusNoContent)
	})
}

func problem(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
