package metrics_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
)

func serveWith(t *testing.T, e *metrics.Exporter, o metrics.ServeOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln, o) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return ln.Addr().String()
}

func steady() *metrics.Exporter {
	return metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		return &live.Facts{Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Zombies: 7}}}, nil, nil
	}, time.Hour, nil)
}

// selfSigned writes a certificate and key for 127.0.0.1 into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "amilint test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestWebConfigTLSAndBasicAuth serves with an exporter-toolkit web
// configuration: a scrape without credentials gets 401, with wrong ones
// 401, with the right ones the metrics, all over TLS; plain HTTP gets no
// metrics.
func TestWebConfigTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	cfg := filepath.Join(dir, "web.yml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", certFile, keyFile, hash), 0o600))
	require.NoError(t, metrics.CheckWebConfig(cfg))
	addr := serveWith(t, steady(), metrics.ServeOptions{WebConfigFile: cfg})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	status := func(user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Up, and the first audit done.
	require.Eventually(t, func() bool {
		code, body := status("prometheus", "s3cret")
		return code == http.StatusOK && strings.Contains(body, "amilint_memcg_zombies")
	}, 30*time.Second, 50*time.Millisecond)
	code, body := status("prometheus", "s3cret")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "amilint_memcg_zombies 7")
	code, _ = status("", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = status("prometheus", "wrong")
	assert.Equal(t, http.StatusUnauthorized, code)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
	if err == nil {
		resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP gets no metrics")
	}

	// A broken configuration fails at start, naming the file.
	bad := filepath.Join(dir, "bad.yml")
	require.NoError(t, os.WriteFile(bad, []byte("basic_auth_users:\n  prometheus: not-a-bcrypt-hash\n"), 0o600))
	assert.ErrorContains(t, metrics.CheckWebConfig(bad), "web config "+bad)
	assert.ErrorContains(t, metrics.CheckWebConfig(filepath.Join(dir, "missing.yml")), "missing.yml")
}

// slowClient is one hostile connection; cut reports when the server
// closed it.
type slowClient struct {
	kind string
	cut  time.Duration
}

// TestSlowClientsAreCut opens 150 hostile connections — 50 trickling
// their headers, 50 trickling a body, 25 idle before a request, 25 idle
// after one — while a normal scraper scrapes every 250 ms: every hostile
// connection is cut by the server (the timeouts allow 30 s at most; the
// test waits up to 90 s, so a connection that is never cut fails it, not
// a slow machine), and every normal scrape is answered.
func TestSlowClientsAreCut(t *testing.T) {
	testenv.Slow(t, "takes the idle timeout (30 s)")
	addr := serveWith(t, steady(), metrics.ServeOptions{})
	c := &http.Client{Timeout: 10 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)

	start := time.Now()
	var kinds []string
	for range 50 {
		kinds = append(kinds, "trickled headers", "trickled body")
	}
	for range 25 {
		kinds = append(kinds, "idle before a request", "idle after a request")
	}
	clients := make([]slowClient, len(kinds))
	var wg sync.WaitGroup
	for i, kind := range kinds {
		clients[i].kind = kind
		wg.Go(func() { clients[i].cut = hostile(t, addr, kind, start) })
	}

	// A normal scraper meanwhile.
	var scrapes, failed atomic.Int32
	var slowest atomic.Int64
	stop := make(chan struct{})
	var sw sync.WaitGroup
	sw.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			t0 := time.Now()
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
			scrapes.Add(1)
			if err != nil {
				failed.Add(1)
				t.Logf("scrape: %v", err)
			}
			if d := int64(time.Since(t0)); d > slowest.Load() {
				slowest.Store(d)
			}
		}
	})
	wg.Wait()
	close(stop)
	sw.Wait()

	var last time.Duration
	byKind := map[string]time.Duration{}
	for _, c := range clients {
		require.Positive(t, c.cut, "a %s connection was never cut", c.kind)
		byKind[c.kind] = max(byKind[c.kind], c.cut)
		last = max(last, c.cut)
	}
	t.Logf("150 slow clients cut, the last after %s (by kind: %v); %d scrapes meanwhile, the slowest %s",
		last.Round(time.Millisecond), byKind, scrapes.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
	assert.Positive(t, scrapes.Load())
	assert.Zero(t, failed.Load(), "every normal scrape is answered")
}

// hostile runs one hostile connection of kind and returns when the server
// cut it, measured from start (0 if it was not cut within 90 s).
func hostile(t *testing.T, addr, kind string, start time.Time) time.Duration {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Errorf("%s: dial: %v", kind, err)
		return 0
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(90 * time.Second))
	br := bufio.NewReader(conn)
	done := make(chan struct{})
	var at time.Duration
	// The reader sees the server close the connection (after any
	// response it sends first).
	watch := func() {
		go func() {
			_, _ = io.Copy(io.Discard, br)
			at = time.Since(start)
			close(done)
		}()
	}
	trickle := func(s string) {
		for i := 0; i < len(s); i++ {
			if _, err := conn.Write([]byte{s[i]}); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	switch kind {
	case "trickled headers":
		watch()
		trickle("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n")
	case "trickled body":
		if _, err := conn.Write([]byte("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")); err != nil {
			t.Errorf("%s: %v", kind, err)
			return 0
		}
		watch()
		trickle(strings.Repeat("b", 1000))
	case "idle before a request":
		watch()
	case "idle after a request":
		if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Errorf("%s: %v", kind, err)
			return 0
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		watch()
	}
	<-done
	if at >= 89*time.Second {
		return 0 // our own deadline, not the server
	}
	return at
}

// TestFailedAuditServesTheLastResultStale: an audit whose policies run
// out of time, or of memory, is counted as failed, by reason, the last good metrics stay served
// marked stale, and /readyz says so while /healthz stays up.
func TestFailedAuditServesTheLastResultStale(t *testing.T) {
	var fail, memory atomic.Bool
	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		switch {
		case memory.Load():
			return nil, nil, fmt.Errorf("evaluate: %w", &policy.MemoryError{Package: "package amilint.rules.hog", Limit: 1 << 20})
		case !fail.Load():
			return &live.Facts{Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Zombies: 7}}}, nil, nil
		}
		return nil, nil, fmt.Errorf("evaluate: %w", &policy.TimeoutError{Package: "package amilint.rules.forever", Limit: time.Second})
	}, time.Hour, nil)
	base := "http://" + serveWith(t, e, metrics.ServeOptions{})
	waitHealthy(t, base)
	fams, _ := scrape(t, base)
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_success", nil))
	assert.Equal(t, 0.0, value(t, fams, "amilint_audit_stale", nil))

	fail.Store(true)
	e.Refresh(context.Background()) // the policy runs out of time
	fams, _ = scrape(t, base)
	assert.Equal(t, 0.0, value(t, fams, "amilint_audit_success", nil))
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_stale", nil))
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": "policy_timeout"}))
	assert.Equal(t, 0.0, value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": "error"}))
	assert.Equal(t, 7.0, value(t, fams, "amilint_memcg_zombies", nil), "the last good result is still served")
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "package amilint.rules.forever ran out of time")
	assert.Contains(t, string(body), "(stale)")
	code, _ = get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code, "audits still run: restarting would fix nothing")

	memory.Store(true)
	e.Refresh(context.Background()) // the policy runs out of memory
	fams, _ = scrape(t, base)
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": "policy_memory"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": "policy_timeout"}))
	assert.Equal(t, 0.0, value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": "error"}))
	assert.Equal(t, 7.0, value(t, fams, "amilint_memcg_zombies", nil), "the last good result is still served")
	_, body = get(t, base+"/readyz")
	assert.Contains(t, string(body), "package amilint.rules.hog ran out of memory")
}

// TestStuckAuditStopsServing: an audit whose policy was given up (a
// built-in call that cannot be interrupted still runs) ends Serve with
// its error after the first audits were served, so that the process
// exits and its supervisor starts it again; a failure of any other kind
// keeps it serving.
func TestStuckAuditStopsServing(t *testing.T) {
	var audits atomic.Int32
	stuck := &policy.StuckError{Err: &policy.TimeoutError{Package: "package amilint.rules.template", Limit: time.Second}, After: 2 * time.Second}
	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		switch audits.Add(1) {
		case 1:
			return &live.Facts{Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Zombies: 7}}}, nil, nil
		case 2:
			return nil, nil, fmt.Errorf("evaluate: %w", &policy.TimeoutError{Package: "package amilint.rules.forever", Limit: time.Second})
		}
		return nil, nil, fmt.Errorf("evaluate: %w", stuck)
	}, 20*time.Millisecond, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = e.Serve(ctx, ln, metrics.ServeOptions{})
	require.NoError(t, ctx.Err(), "Serve did not return")
	assert.True(t, policy.IsStuck(err), "%v", err)
	assert.ErrorIs(t, err, policy.ErrTimeout)
	assert.Contains(t, err.Error(), "stopped serving: evaluate: evaluate policies: package amilint.rules.template ran out of time")
	assert.Equal(t, int32(3), audits.Load(), "served on after a plain failure, stopped at the stuck one")
	_, err = net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	assert.Error(t, err, "the listener is closed")
}
