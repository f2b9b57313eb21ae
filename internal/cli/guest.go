//go:build amilint_guest

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/amilint/amilint/internal/host/live"
)

// The guest build (`-tags amilint_guest`) is the amilint the Packer plugin
// uploads into the image being built: everything a guest audit uses (scan,
// fix, live, facts, units of a directory), and none of what it cannot use:
// the AWS clients and the disk image, tarball and container image readers
// (see the target package), the Prometheus exporter, and the commands that
// run on a workstation or in CI (policy test, report, security, diff), and
// HTML reports (see the report package). Each of those refuses with
// one line naming the full amilint.

// notInGuest refuses command cmd.
func notInGuest(e *env, cmd string) int {
	return fail(e, cmd, errors.New("not in the guest build of amilint (the binary the Packer plugin uploads); use the full amilint"))
}

// runPolicy refuses `amilint policy test`: policy tests run where the
// policies are written.
func runPolicy(e *env, _ []string) int { return notInGuest(e, "policy") }

// runDiff refuses `amilint diff`: comparing two images is done where both
// are.
func runDiff(e *env, _ []string) int { return notInGuest(e, "diff") }

// runSecurity refuses `amilint security`: exposure scores are a review of
// an image's units, made where images are reviewed.
func runSecurity(e *env, _ []string) int { return notInGuest(e, "security") }

// runReport refuses `amilint report`: rollout reports aggregate the
// reports of many images, on a workstation or in CI.
func runReport(e *env, _ []string) int { return notInGuest(e, "report") }

// flavor is what `amilint version` adds after the version.
const flavor = " (guest build)"

// The defaults of `live --interval` and `--web.max-connections`: the
// metrics package's, which the guest build does not link.
const (
	defaultServeInterval  = 15 * time.Second
	defaultMaxConnections = 256
)

// serveConfig is what `live --serve` was given.
type serveConfig struct {
	addr      string
	interval  time.Duration
	webConfig string
	maxConns  int
}

// serveMetrics refuses `live --serve` in the guest build: it carries no
// Prometheus exporter (a guest is audited once, not scraped).
func serveMetrics(_ *env, _ *live.Host, cfg serveConfig) error {
	return fmt.Errorf("--serve %s: the Prometheus exporter is not in the guest build of amilint (the binary the Packer plugin uploads); use the full amilint", cfg.addr)
}
