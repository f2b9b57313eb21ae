//go:build !amilint_guest

package target_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/ebs/ebstest"
	"github.com/amilint/amilint/internal/image/netguard"
	"github.com/amilint/amilint/internal/image/target"
)

// silent reads the request and answers nothing until the client hangs up
// (the server notices that only once the request's body is read: EC2's
// requests are POSTs).
func silent(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

// TestAWSEndpointThatStopsAnswering: an EBS or EC2 endpoint that takes the
// request and says nothing fails the target once silent for netguard.Stall
// (lowered here); one that answers without end fails past 16 MiB. Neither
// holds the scan until the caller gives up.
func TestAWSEndpointThatStopsAnswering(t *testing.T) {
	defer func(s time.Duration) { netguard.Stall = s }(netguard.Stall)
	netguard.Stall = 300 * time.Millisecond
	var busy atomic.Bool
	for name, tt := range map[string]struct {
		spec     string
		h        http.HandlerFunc
		want     error
		requests int32
	}{
		"no answer, ebs": {"ebs:snap-0123", silent, netguard.ErrStalled, 1},
		"no answer, ec2": {"ami:ami-0123", silent, netguard.ErrStalled, 1},
		// A 503 may pass on a second try, and is retried.
		"busy, then no answer": {"ebs:snap-0123", func(w http.ResponseWriter, r *http.Request) {
			if !busy.Swap(true) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"message":"busy"}`))
				return
			}
			silent(w, r)
		}, netguard.ErrStalled, 2},
		"a block list without end": {"ebs:snap-0123", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"Blocks":[`))
			b := []byte(strings.Repeat(`{"BlockIndex":1,"BlockToken":"t"},`, 1000))
			for range 1 << 20 {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
		}, netguard.ErrTooLarge, 1},
	} {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				tt.h(w, r)
			}))
			defer srv.Close()
			ebstest.UseEndpoint(t, srv.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := target.Open(ctx, tt.spec, target.Options{})
			require.ErrorIs(t, err, tt.want)
			assert.NoError(t, ctx.Err(), "held until the test's deadline")
			// The SDK retries what may pass on a second try; a server
			// silent for a minute, or one answering without end, is not
			// asked again (three tries made a stall three minutes).
			assert.Equal(t, tt.requests, requests.Load(), "requests")
		})
	}
}
