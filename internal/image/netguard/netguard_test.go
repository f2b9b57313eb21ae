package netguard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/netguard"
)

const stall = 200 * time.Millisecond

// server serves h on loopback until the test ends; a handler that waits
// for its request's end is released when the client gives up.
func server(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func get(t *testing.T, d netguard.Doer, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	return d.Do(req)
}

func transport(o netguard.Options) netguard.Doer {
	return &http.Client{Transport: &netguard.Transport{Options: o}}
}

// silent never answers until the client hangs up.
func silent(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func TestNoResponseStalls(t *testing.T) {
	url := server(t, silent)
	for name, d := range map[string]netguard.Doer{
		"transport": transport(netguard.Options{Stall: stall}),
		"client":    netguard.Client(&http.Client{}, netguard.Options{Stall: stall}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := get(t, d, url)
			require.ErrorIs(t, err, netguard.ErrStalled)
			assert.Contains(t, err.Error(), "the server stopped answering: nothing for 200ms")
		})
	}
}

func TestBodyThatStopsStalls(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("a few bytes"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	resp, err := get(t, transport(netguard.Options{Stall: stall}), url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Equal(t, "a few bytes", string(b))
	require.ErrorIs(t, err, netguard.ErrStalled)
}

// TestSlowButSteadyIsNotAStall: a body that keeps arriving, each part
// within the bound, is read whole however long it takes in all; and time
// the reader spends between reads does not count against the server.
func TestSlowButSteadyIsNotAStall(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		for range 6 {
			w.Write([]byte("part "))
			w.(http.Flusher).Flush()
			time.Sleep(stall / 4)
		}
	})
	resp, err := get(t, transport(netguard.Options{Stall: stall}), url)
	require.NoError(t, err)
	defer resp.Body.Close()
	time.Sleep(2 * stall) // the reader is busy elsewhere
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("part ", 6), string(b))
}

func TestBodyCap(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		for range 1 << 20 { // 16 MiB unless the client hangs up
			if _, err := w.Write([]byte("0123456789abcdef")); err != nil {
				return
			}
		}
	})
	resp, err := get(t, netguard.Client(&http.Client{}, netguard.Options{MaxBody: 1000}), url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, netguard.ErrTooLarge)
	assert.Contains(t, err.Error(), "over 1000 bytes")
	assert.LessOrEqual(t, len(b), 1001)

	url = server(t, func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 1000)) })
	resp, err = get(t, netguard.Client(&http.Client{}, netguard.Options{MaxBody: 1000}), url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err = io.ReadAll(resp.Body)
	require.NoError(t, err, "a body of exactly the cap")
	assert.Len(t, b, 1000)
}

// TestCallerCancelIsNotAStall: the caller's own cancellation comes back as
// such, not as a stalled server.
func TestCallerCancelIsNotAStall(t *testing.T) {
	url := server(t, silent)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	_, err = transport(netguard.Options{Stall: time.Hour}).Do(req)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, netguard.ErrStalled)
}
