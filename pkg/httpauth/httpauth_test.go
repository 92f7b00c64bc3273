package httpauth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troy-audit/troy/pkg/httpauth"
)

func TestScopedTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	ingest, err := httpauth.Append(file, "collector", []string{httpauth.Ingest})
	require.NoError(t, err)
	admin, err := httpauth.Append(file, "ops", []string{httpauth.Admin})
	require.NoError(t, err)
	_, err = httpauth.Append(file, "collector", []string{httpauth.Read})
	assert.ErrorContains(t, err, "already has a token named")
	st, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, _ := os.ReadFile(file)
	assert.NotContains(t, string(b), ingest, "only hashes are kept")
	assert.True(t, strings.HasPrefix(ingest, "troy_"))

	ts, err := httpauth.Load(file)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := ts.Require(httpauth.Guard, ok)
	for _, c := range []struct {
		header string
		want   int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer troy_wrong", http.StatusUnauthorized},
		{"Basic " + ingest, http.StatusUnauthorized},
		{"Bearer " + ingest, http.StatusForbidden},
		{"Bearer " + admin, http.StatusNoContent},
	} {
		req := httptest.NewRequest(http.MethodPost, "/v1/guard/check", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, c.want, rec.Code, c.header)
		if c.want == http.StatusUnauthorized {
			assert.Equal(t, `Bearer realm="troy"`, rec.Header().Get("WWW-Authenticate"))
		}
		if c.want == http.StatusForbidden {
			assert.Contains(t, rec.Body.String(), `token \"collector\" may not do this: it needs scope \"guard\"`)
		}
	}
}

func TestTokensFileErrorsSayWhere(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"":                   "holds no token",
		"# only a comment\n": "holds no token",
		"a guard\n":          "tokens:1: 2 fields",
		"\na fly sha256:" + strings.Repeat("0", 64): `tokens:2: scope "fly" is not one of`,
		"a guard md5:00\n":                          "tokens:1: the hash is not sha256",
		"a guard sha256:" + strings.Repeat("0", 64) + "\na read sha256:" + strings.Repeat("1", 64): `tokens:2: token name "a" is used twice`,
	} {
		file := filepath.Join(dir, "tokens")
		require.NoError(t, os.WriteFile(file, []byte(content), 0o600))
		_, err := httpauth.Load(file)
		assert.ErrorContains(t, err, want, content)
	}
	_, err := httpauth.Load(filepath.Join(dir, "missing"))
	assert.ErrorContains(t, err, "troy tokens add")

	open := filepath.Join(dir, "open")
	require.NoError(t, os.WriteFile(open, []byte("a guard sha256:"+strings.Repeat("0", 64)+"\n"), 0o600))
	require.NoError(t, os.Chmod(open, 0o666))
	_, err = httpauth.Load(open)
	assert.ErrorContains(t, err, "writable by others", "whoever may write it may let themselves in")
}

// A token removed from the file stops working without a restart, one
// added starts, and a file edited into nonsense lets nobody in.
func TestTokensFollowTheirFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	first, err := httpauth.Append(file, "first", []string{httpauth.Guard})
	require.NoError(t, err)
	ts, err := httpauth.Load(file)
	require.NoError(t, err)
	var heard []string // what the operator's log hears
	var heardMu sync.Mutex
	ts.OnReload = func(n int, err error) {
		heardMu.Lock()
		defer heardMu.Unlock()
		heard = append(heard, fmt.Sprint(n, err))
	}
	h := ts.Require(httpauth.Guard, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	code := func(token string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/guard/check", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	c, _ := code(first)
	require.Equal(t, http.StatusNoContent, c)

	// replace the file: a second token only
	next := filepath.Join(dir, "next")
	second, err := httpauth.Append(next, "second", []string{httpauth.Guard})
	require.NoError(t, err)
	require.NoError(t, os.Rename(next, file))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, _ := code(first)
		assert.Equal(c, http.StatusUnauthorized, got, "the removed token")
	}, 5*time.Second, 100*time.Millisecond)
	c, _ = code(second)
	assert.Equal(t, http.StatusNoContent, c, "the added token")

	require.NoError(t, os.WriteFile(file, []byte("second guard not-a-hash\n"), 0o600))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, body := code(second)
		assert.Equal(c, http.StatusServiceUnavailable, got, "a broken file lets nobody in")
		assert.Contains(c, body, "tokens file cannot be used")
	}, 5*time.Second, 100*time.Millisecond)
	heardMu.Lock()
	defer heardMu.Unlock()
	require.Len(t, heard, 2, "a reload, then the broken file, once: %q", heard)
	assert.Equal(t, "1 <nil>", heard[0])
	assert.Contains(t, heard[1], "the hash is not sha256")
}

// troy tokens remove: the line goes, the others stay, the file stays 0600.
func TestRemoveRevokesOneToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	_, err := httpauth.Append(path, "ci", []string{"ingest"})
	require.NoError(t, err)
	_, err = httpauth.Append(path, "ops", []string{"approve"})
	require.NoError(t, err)
	left, err := httpauth.Remove(path, "ci")
	require.NoError(t, err)
	assert.Equal(t, 1, left)
	ts, err := httpauth.Load(path)
	require.NoError(t, err)
	require.Len(t, ts.Names(), 1)
	assert.Equal(t, "ops", ts.Names()[0].Name)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	_, err = httpauth.Remove(path, "ci")
	assert.ErrorContains(t, err, `has no token named "ci"`)

	// through a link, the file it points at keeps its mode (serve may run
	// as a group member) and stays the file the link points at
	require.NoError(t, os.Chmod(path, 0o640))
	_, err = httpauth.Append(path, "ci", []string{"ingest"})
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	_, err = httpauth.Remove(link, "ci")
	require.NoError(t, err)
	fi, err = os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "still a link")
	fi, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	ts, err = httpauth.Load(path)
	require.NoError(t, err)
	assert.Len(t, ts.Names(), 1)
}
