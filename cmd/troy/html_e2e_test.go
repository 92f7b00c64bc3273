package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium finds a headless browser (make test installs Debian's chromium
// when it can).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: install it (Debian: apt-get install chromium; make test does when it can)")
	return ""
}

// browse loads a page in headless Chromium and returns its DOM after the
// page's scripts ran, and what the page logged to the console.
func browse(t *testing.T, page string, extra ...string) (dom string, console []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + t.TempDir()}, extra...)
	cmd := exec.CommandContext(ctx, chromium(t), append(args, "file://"+page)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") {
			console = append(console, l)
		}
	}
	return string(out), console
}

// The HTML reports open in a real browser without a console message, show
// the graph and every step, and the batch page's table sorts by a column.
func TestHTMLReportsInChromium(t *testing.T) {
	traces, policy := examples(t)
	dir := t.TempDir()
	r := troy(t, dir, "audit-batch", traces, policy, "--out-dir", "out", "--html", "out/index.html", "--formats", "md,json,html")
	require.Equal(t, 0, r.code, r.stderr)

	report := filepath.Join(dir, "out", "support-bot-pii-exfil-001", "report.html")
	dom, console := browse(t, report, "--dump-dom")
	assert.Empty(t, console, "the report logs nothing to the console")
	assert.Contains(t, dom, `<svg id="graph"`)
	assert.Equal(t, 5, strings.Count(dom, `<rect class="node"`), "a node per step")
	assert.Contains(t, dom, "pii-exfiltration")

	index := filepath.Join(dir, "out", "index.html")
	dom, console = browse(t, index, "--dump-dom")
	assert.Empty(t, console, "the batch page logs nothing to the console")
	assert.Equal(t, 6, strings.Count(dom, `/report.html"`), "a link to each trace's report")

	// click the Risk column, as a person would: the rows sort by risk
	page, err := os.ReadFile(index)
	require.NoError(t, err)
	clicked := filepath.Join(dir, "out", "clicked.html")
	require.NoError(t, os.WriteFile(clicked, []byte(strings.Replace(string(page), "</body>",
		`<script>document.querySelectorAll("#traces th")[6].click()</script></body>`, 1)), 0o600))
	dom, console = browse(t, clicked, "--dump-dom")
	assert.Empty(t, console)
	var risks []string
	for _, m := range regexp.MustCompile(`<td>(\d+)</td><td>audited`).FindAllStringSubmatch(dom, -1) {
		risks = append(risks, m[1])
	}
	assert.Equal(t, []string{"0", "25", "50", "65", "70", "75"}, risks, "sorted by risk")

	// the trends of a logs folder, charted
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "logs"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(dir, "out"), filepath.Join(dir, "logs", "2026-11-30")))
	r = troy(t, dir, "trends", "logs", "--html", "trends.html")
	require.Equal(t, 0, r.code, r.stderr)
	dom, console = browse(t, filepath.Join(dir, "trends.html"), "--dump-dom")
	assert.Empty(t, console)
	assert.Equal(t, 4, strings.Count(dom, `<rect class="bar"`), "one day: critical, high, medium and low")
	report = filepath.Join(dir, "logs", "2026-11-30", "support-bot-pii-exfil-001", "report.html")
	index = filepath.Join(dir, "logs", "2026-11-30", "index.html")

	if art := os.Getenv("TROY_TEST_ARTIFACTS"); art != "" { // a picture of each, for people
		for name, shot := range map[string]struct{ page, size string }{"html-report.png": {report, "1200,1600"}, "html-batch.png": {index, "1200,600"}} {
			browse(t, shot.page, "--hide-scrollbars", "--window-size="+shot.size, "--screenshot="+filepath.Join(art, name))
		}
	}
}
