// Package netguard bounds what a remote server can make amilint wait for,
// or hold, on the network targets (a registry, the EBS and EC2 APIs): a
// request whose response does not begin, or whose body sends nothing
// more, within Stall fails with ErrStalled, and a body past its cap fails
// with ErrTooLarge. A server that accepts a connection and then says
// nothing would otherwise hold a scan until someone pressed Ctrl-C, and
// one that sends without end would grow whatever reads it whole.
//
// The bound is on silence, not on the whole transfer: a layer of
// gigabytes that keeps arriving is never cut off.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Stall is how long a request may wait for its response to begin, or for
// more of its body, unless Options say otherwise. A real registry or EBS
// endpoint answers in milliseconds; a minute of silence is a server that
// stopped. A variable so that the tests of the targets using it can lower
// it.
var Stall = time.Minute

// ErrStalled is returned for a response that stopped arriving.
var ErrStalled = errors.New("the server stopped answering")

// ErrTooLarge is returned for a response body past its cap.
var ErrTooLarge = errors.New("response too large")

// Doer sends a request, as an *http.Client does (and as the AWS SDK asks
// of its HTTP client).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Options set the bounds; the zero value is Stall and no cap.
type Options struct {
	// Stall replaces Stall (tests).
	Stall time.Duration
	// MaxBody caps each response body, in bytes; 0 is no cap.
	MaxBody int64
}

func (o Options) stall() time.Duration {
	if o.Stall > 0 {
		return o.Stall
	}
	return Stall
}

// Transport is an http.RoundTripper that bounds each round trip of Base
// (http.DefaultTransport if nil).
type Transport struct {
	Base http.RoundTripper
	Options
}

// RoundTrip sends req through Base within the bounds.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return guard(req, t.Options, base.RoundTrip)
}

// Client bounds each request a Doer sends.
func Client(d Doer, o Options) Doer { return client{d, o} }

type client struct {
	d Doer
	o Options
}

func (c client) Do(req *http.Request) (*http.Response, error) { return guard(req, c.o, c.d.Do) }

// guard sends req with a context that a watchdog cancels after o's stall
// of silence: while the response has not begun, and while a read of its
// body waits for bytes. Time the reader spends elsewhere between two reads
// does not count: a slow consumer is not a stalled server.
func guard(req *http.Request, o Options, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	stall := o.stall()
	ctx, cancel := context.WithCancelCause(req.Context())
	w := &watchdog{
		stall:  stall,
		cancel: cancel,
		err:    fmt.Errorf("%s %s: %w: nothing for %s", req.Method, req.URL.Redacted(), ErrStalled, stall),
	}
	w.arm()
	resp, err := send(req.WithContext(ctx))
	w.disarm()
	if err != nil {
		w.stop()
		if errors.Is(context.Cause(ctx), ErrStalled) {
			err = w.err
		}
		return nil, err
	}
	resp.Body = &body{rc: resp.Body, w: w, ctx: ctx, left: o.MaxBody, max: o.MaxBody, url: req.URL.Redacted()}
	return resp, nil
}

// watchdog cancels a request once it has waited stall for the server.
type watchdog struct {
	stall  time.Duration
	cancel context.CancelCauseFunc
	err    error

	mu    sync.Mutex
	timer *time.Timer
}

// arm starts the countdown: the request waits for the server.
func (w *watchdog) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(w.stall, func() { w.cancel(w.err) })
	} else {
		w.timer.Reset(w.stall)
	}
}

// disarm stops the countdown: the server answered.
func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer.Stop()
}

// stop ends the watch and releases the request's context.
func (w *watchdog) stop() {
	w.disarm()
	w.cancel(context.Canceled)
}

// body is a response body read under the watchdog and the cap.
type body struct {
	rc        io.ReadCloser
	w         *watchdog
	ctx       context.Context
	left, max int64 // max 0: no cap
	url       string
}

func (b *body) Read(p []byte) (int, error) {
	if b.max > 0 && int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	b.w.arm()
	n, err := b.rc.Read(p)
	b.w.disarm()
	if b.max > 0 {
		if b.left -= int64(n); b.left < 0 {
			b.w.stop()
			return n, fmt.Errorf("%s: %w: over %d bytes", b.url, ErrTooLarge, b.max)
		}
	}
	if err != nil && err != io.EOF {
		if c := context.Cause(b.ctx); errors.Is(c, ErrStalled) {
			err = c
		}
	}
	return n, err
}

func (b *body) Close() error {
	b.w.stop()
	return b.rc.Close()
}
