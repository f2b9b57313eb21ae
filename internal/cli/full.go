//go:build !amilint_guest

package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/audit/finding"
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
	audit := func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		doc, fs, err := host.Audit(ctx)
		if doc == nil {
			return nil, nil, err
		}
		return doc.Live, fs, err
	}
	opts := metrics.ServeOptions{WebConfigFile: cfg.webConfig, MaxConnections: cfg.maxConns}
	return metrics.New(audit, cfg.interval, e.log).Serve(e.ctx, ln, opts)
}

// listenAddr makes an address with a bare IPv6 host ("fd00::12:9847",
// what "$(POD_IP):9847" gives in a Kubernetes manifest on an IPv6 pod)
// the bracketed form net.Listen takes; any other address is returned as
// is.
func listenAddr(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return addr
	}
	if ip := net.ParseIP(addr[:i]); ip != nil && ip.To4() == nil {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}
