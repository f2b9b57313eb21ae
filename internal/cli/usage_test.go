package cli

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpSections runs `amilint ARGS --help` and returns its flags by section
// title, in the order printed.
func helpSections(t *testing.T, args ...string) (titles []string, flags map[string][]string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	require.Equal(t, ExitOK, Run(context.Background(), append(args, "--help"), &stdout, &stderr), stderr.String())
	flags = map[string][]string{}
	title := ""
	flagRe := regexp.MustCompile(`^  --?([a-z0-9.-]+)`)
	for _, l := range strings.Split(stderr.String(), "\n") {
		switch {
		case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
			title = strings.TrimSuffix(l, ":")
			titles = append(titles, title)
		case flagRe.MatchString(l):
			require.NotEmpty(t, title, "flag line %q before any section", l)
			flags[title] = append(flags[title], flagRe.FindStringSubmatch(l)[1])
		}
	}
	return titles, flags
}

// TestHelpGroupsFlags checks that every command's --help lists each of its
// flags once, under a section saying what it applies to, and never under
// "other flags" (a new flag must be given a section in sectionOf).
func TestHelpGroupsFlags(t *testing.T) {
	for name := range commands() {
		args := []string{name}
		if name == "policy" {
			args = append(args, "test")
		}
		if name == "version" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			titles, flags := helpSections(t, args...)
			require.NotEmpty(t, titles, "%s --help lists flags", name)
			assert.NotContains(t, titles, "other flags", "flags without a section: %v", flags["other flags"])
			seen := map[string]bool{}
			for _, fs := range flags {
				for _, f := range fs {
					assert.False(t, seen[f], "%s listed twice", f)
					seen[f] = true
				}
			}
		})
	}
}

func TestFixHelpSeparatesImageAndLiveFlags(t *testing.T) {
	titles, flags := helpSections(t, "fix")
	assert.Equal(t, []string{"mode", "image flags (fix DIR)", "--live flags (fix --live: the running host, over D-Bus)",
		"policy flags (what is judged, what fails)"}, titles)
	image, live := flags[titles[1]], flags[titles[2]]
	for _, f := range []string{"partition", "backing", "harden"} {
		assert.Contains(t, image, f)
		assert.NotContains(t, live, f)
	}
	for _, f := range []string{"bus", "root", "collect", "sample"} {
		assert.Contains(t, live, f)
		assert.NotContains(t, image, f)
	}
	assert.Equal(t, []string{"dry-run", "live"}, flags["mode"])
	assert.Contains(t, flags[titles[3]], "fail-on")
}

func TestScanAndLiveHelpSections(t *testing.T) {
	titles, flags := helpSections(t, "scan")
	assert.Equal(t, []string{"image target flags (how TARGET is read)", "policy flags (what is judged, what fails)", "output flags"}, titles)
	assert.Equal(t, []string{"o", "output"}, flags["output flags"])
	titles, flags = helpSections(t, "live")
	assert.Equal(t, []string{"host flags (which host, which collectors, live thresholds)", "policy flags (what is judged, what fails)", "output flags"}, titles)
	assert.True(t, slices.Contains(flags["output flags"], "serve"))
	assert.True(t, slices.Contains(flags[titles[0]], "bus"))
}
