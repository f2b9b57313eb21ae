//go:build !amilint_guest

package report

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// chromiumArgs are the flags for a quiet, offline, single-shot headless
// Chromium that leaves nothing behind but its output.
func chromiumArgs(profile string) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir=" + profile}
}

func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin := testenv.Tool(t, "chromium", "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(chromiumArgs(t.TempDir()), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
	return stdout.Bytes()
}

// artifactDir is where screenshots are kept: $AMILINT_ARTIFACTS (make
// e2e-html sets dist/e2e-html) or the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("AMILINT_ARTIFACTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// paletteStats counts a PNG's distinct colors and the share of its most
// common one, and reports whether it holds color c.
func paletteStats(t *testing.T, path string, want [3]uint8) (distinct int, topShare float64, has bool) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "screenshot is a PNG")
	counts := map[[3]uint8]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	return len(counts), float64(top) / float64(b.Dx()*b.Dy()), counts[want] > 0
}

// TestHTMLInChromium renders the realistic live report and the rollout
// report in real headless Chromium: the DOM text must carry the ecs.service
// finding, and the screenshot must be a real page (many colors, no single
// color covering it, the chart's system-time red present).
func TestHTMLInChromium(t *testing.T) {
	dir := artifactDir(t)
	pages := []struct {
		name     string
		html     []byte
		dom      []string
		chartRed bool
	}{
		{"report", render(t, "html", sampleReport(), WithLive(sampleLive())),
			[]string{"ecs.service", "ecs-agent-unused", "systemctl disable ecs.service", "70071", "Per-core CPU"}, true},
		{"rollout", renderRollout(t, fleet()), []string{"ecs.service", "ecs-agent-unused", "dlami-ubuntu-20.04-b"}, false},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			htmlPath := filepath.Join(dir, p.name+".html")
			require.NoError(t, os.WriteFile(htmlPath, p.html, 0o644))
			url := "file://" + htmlPath

			dom := string(chromium(t, "--dump-dom", url))
			require.Contains(t, dom, "<body>", "Chromium loaded the page")
			text := domText(dom)
			for _, s := range p.dom {
				assert.Contains(t, text, s)
			}

			shot := filepath.Join(dir, p.name+".png")
			_ = os.Remove(shot)
			chromium(t, "--screenshot="+shot, "--window-size=1280,2000", url)
			distinct, top, red := paletteStats(t, shot, [3]uint8{0xc6, 0x28, 0x28})
			t.Logf("%s: %d distinct colors, most common covers %.0f%%", shot, distinct, 100*top)
			assert.Greater(t, distinct, 64, "a blank or broken page has few colors")
			assert.Less(t, top, 0.97, "one color covers the page: blank")
			if p.chartRed {
				assert.True(t, red, "the per-core chart's system-time red is on the page")
			}
		})
	}
}

// TestBlankScreenshotIsCaught is the negative control of the screenshot
// check: an empty page fails it.
func TestBlankScreenshotIsCaught(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "blank.html")
	require.NoError(t, os.WriteFile(page, []byte("<!DOCTYPE html><html><body></body></html>"), 0o644))
	shot := filepath.Join(dir, "blank.png")
	chromium(t, "--screenshot="+shot, "--window-size=1280,2000", "file://"+page)
	distinct, top, _ := paletteStats(t, shot, [3]uint8{})
	assert.True(t, distinct <= 64 || top >= 0.97, "blank page: %d colors, top %.2f", distinct, top)
}

func renderRollout(t *testing.T, r *Rollout) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, rolloutHTML{}.Write(&b, r))
	return b.Bytes()
}

// domText is the page's text: the serialized DOM with tags removed and
// the few entities html/template writes decoded.
func domText(dom string) string {
	var b strings.Builder
	in := false
	for _, r := range dom {
		switch {
		case r == '<':
			in = true
			b.WriteByte(' ')
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'").Replace(b.String())
}

// colorCount counts a PNG's pixels of exactly color c.
func colorCount(t *testing.T, path string, c [3]uint8) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)} == c {
				n++
			}
		}
	}
	return n
}

// TestRolloutChartsInChromium renders the rollout report of a fleet audited
// on three days in headless Chromium: both pictures are in the DOM, the
// page loads nothing from outside, and the pictures really paint — the page
// holds far more of each severity's color than the same page with the
// figures cut out.
func TestRolloutChartsInChromium(t *testing.T) {
	dir := artifactDir(t)
	page := renderRollout(t, datedFleet())
	assert.NotRegexp(t, `(?i)<(script|img|link|iframe|object)\b|\b(src|href)="|url\(`, string(page), "no external asset")
	without := regexp.MustCompile(`(?s)<figure class="chart">.*?</figure>`).ReplaceAll(page, nil)
	require.NotEqual(t, len(page), len(without))
	colors := map[string][3]uint8{"high": {0xc6, 0x28, 0x28}, "medium": {0xe6, 0x51, 0x00}, "low": {0x15, 0x65, 0xc0}}
	counts := map[string]map[string]int{}
	for name, html := range map[string][]byte{"rollout-charts": page, "rollout-without-charts": without} {
		htmlPath := filepath.Join(dir, name+".html")
		require.NoError(t, os.WriteFile(htmlPath, html, 0o644))
		if name == "rollout-charts" {
			dom := string(chromium(t, "--dump-dom", "file://"+htmlPath))
			for _, s := range []string{`aria-label="Unwaived findings per severity, by target"`, `aria-label="Unwaived findings per severity over time"`,
				"2026-11-23", "2026-11-25", "dlami-ubuntu-20.04-b: high 1"} {
				assert.Contains(t, dom, s)
			}
		}
		shot := filepath.Join(dir, name+".png")
		_ = os.Remove(shot)
		chromium(t, "--screenshot="+shot, "--window-size=1280,2400", "file://"+htmlPath)
		counts[name] = map[string]int{}
		for sev, c := range colors {
			counts[name][sev] = colorCount(t, shot, c)
		}
	}
	t.Logf("pixels of each severity's color: with the charts %v, without %v", counts["rollout-charts"], counts["rollout-without-charts"])
	for sev := range colors {
		assert.Greater(t, counts["rollout-charts"][sev]-counts["rollout-without-charts"][sev], 1500, "the charts paint %s bars", sev)
	}
}
