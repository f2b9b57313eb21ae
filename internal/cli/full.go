//go:build !amilint_guest

package cli

import (
	"fmt"
	"net"
	"time"

	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
)

// flavor is what `amilint version` adds after the version: nothing for the
// full build.
const flavor = ""

// The defaults of `live --interval` and `--web.max-connections`.
const (
	defaultServeInterval  = metrics.DefaultInterval
	defaultMaxConnections = metrics.DefaultMaxConnections
)

// serveConfig is what `live --serve` was given.
type serveConfig struct {
	addr      string
	interval  time.Duration
	webConfig string
	maxConns  int
}

// serveMetrics serves the Prometheus metrics and /healthz of host's live
// audit on cfg.addr until the context ends (`amilint live --serve ADDR`).
func serveMetrics(e *env, host *live.Host, cfg serveConfig) error {
	if err := metrics.CheckWebConfig(cfg.webConfig); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listenAddr(cfg.addr))
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.addr, err)
	}
	fmt.Fprintf(e.stderr, "amilint live: serving /metrics and /healthz on %s\n", ln.Addr())
	opts := metrics.ServeOptions{WebConfigFile: cfg.webConfig, MaxConnections: cfg.maxConns}
	return metrics.New(host.AuditLive, cfg.interval, e.log).Serve(e.ctx, ln, opts)
}
