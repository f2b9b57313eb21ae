package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/bus/bustest"
)

// TestLiveServeUnderLoad runs `amilint live --serve 127.0.0.1:0` over a
// host root with a systemd bus (a real dbus-daemon with a fake manager),
// audits every second, and scrapes /metrics, /healthz and /readyz from 16
// clients at once, 4,800 requests a round: a warm-up round, then two
// measured ones. Every request succeeds, and after them (idle
// connections closed) the process's open files, goroutines and live heap
// are back where the warm-up left them: nothing grows with the scrapes.
func TestLiveServeUnderLoad(t *testing.T) {
	b := bustest.New(t, []bustest.Unit{
		{Name: "ecs.service", FileState: "enabled", ActiveState: "activating", SubState: "auto-restart", NRestarts: 40, Result: "exit-code", Restart: "always"},
		{Name: "ssh.service", FileState: "enabled", ActiveState: "active", SubState: "running", Result: "success", Restart: "on-failure"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"live", "--serve", "127.0.0.1:0", "--root", hostRoot(t), "--bus", b.Socket(),
			"--sample", "20ms", "--interval", "1s", "--zombie-threshold", "1000000"}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("amilint live --serve did not stop with its context")
		}
	}()
	addr := regexp.MustCompile(`on (127\.0\.0\.1:\d+)`)
	var base string
	require.Eventually(t, func() bool {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			base = "http://" + m[1]
		}
		return base != ""
	}, 30*time.Second, 20*time.Millisecond)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "every collector ready: %s", stderr.String())

	const clients, perClient = 16, 300
	load := func() (ok, failed int64) {
		var wg sync.WaitGroup
		var nok, nfail atomic.Int64
		var once sync.Once
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					path := []string{"/metrics", "/healthz", "/readyz"}[(c+i)%3]
					resp, err := client.Get(base + path)
					if err != nil {
						nfail.Add(1)
						continue
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || (path == "/metrics" && !regexp.MustCompile(`amilint_unit_restarts_total\{unit="ecs.service"\}`).Match(body)) {
						nfail.Add(1)
						once.Do(func() {
							var rb []byte
							if r, rerr := client.Get(base + "/readyz"); rerr == nil {
								rb, _ = io.ReadAll(r.Body)
								r.Body.Close()
							}
							t.Logf("first failure: %s: %d %v; readyz: %s", path, resp.StatusCode, err, rb)
						})
						continue
					}
					nok.Add(1)
				}
			})
		}
		wg.Wait()
		return nok.Load(), nfail.Load()
	}
	// usage is the process's open files, goroutines and live heap, once
	// the clients' idle connections are closed and the server saw them go.
	usage := func() (fds, goroutines int, heap uint64) {
		client.CloseIdleConnections()
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return len(ents), runtime.NumGoroutine(), ms.HeapAlloc
	}

	ok, failed := load()
	require.Zero(t, failed, "warm-up: every request answered")
	require.Equal(t, int64(clients*perClient), ok, "warm-up")
	fds0, g0, heap0 := usage()
	for round := range 2 {
		ok, failed := load()
		assert.Equal(t, int64(clients*perClient), ok, "round %d", round)
		assert.Zero(t, failed, "round %d", round)
	}
	fds1, g1, heap1 := usage()
	t.Logf("after %d scrapes: open files %d -> %d, goroutines %d -> %d, live heap %d KiB -> %d KiB",
		2*clients*perClient, fds0, fds1, g0, g1, heap0>>10, heap1>>10)
	// A steady state, not zero change: an audit may be in flight at
	// either reading (its connections, its goroutines, its facts).
	assert.LessOrEqual(t, fds1, fds0+4, "open files stay flat")
	assert.LessOrEqual(t, g1, g0+8, "goroutines stay flat")
	assert.LessOrEqual(t, heap1, heap0+8<<20, "live heap stays flat")
}
