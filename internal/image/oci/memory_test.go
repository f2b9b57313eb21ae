package oci

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigLayer writes a gzip layer of about total bytes to w, generated as it
// goes (nothing of it is held): large programs, and small configuration
// files that the keep rule holds.
func bigLayer(w io.Writer, total int64) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	block := make([]byte, 64<<10)
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := range 512 {
		block[i] = byte(rng.Uint32())
	}
	for i := 512; i < len(block); i++ {
		block[i] = block[i%512] ^ byte(i/512) // compressible, not trivially
	}
	for i := 0; total > 0; i++ {
		size := min(total, 32<<20)
		total -= size
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("usr/lib/big/%d.so", i), Typeflag: tar.TypeReg, Mode: 0o755, Size: size}); err != nil {
			return err
		}
		for left := size; left > 0; left -= int64(len(block)) {
			if _, err := tw.Write(block[:min(left, int64(len(block)))]); err != nil {
				return err
			}
		}
		conf := fmt.Sprintf("[Service]\nExecStart=/usr/lib/big/%d.so\n", i)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("etc/systemd/system/big%d.service", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(conf))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, conf); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// generated is a layer blob produced on demand through a pipe.
func generated(total int64) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(bigLayer(pw, total)) }()
		return pr, nil
	}
}

// TestStreamingABigLayerHoldsLittle is the memory acceptance check: a
// layer of hundreds of MiB (AMILINT_OCI_BIG_LAYER_MIB, 256 by default) is
// streamed, verified and applied while the heap stays within a bound that
// does not grow with the layer.
func TestStreamingABigLayerHoldsLittle(t *testing.T) {
	mib := int64(256)
	if v := os.Getenv("AMILINT_OCI_BIG_LAYER_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		mib = n
	}
	total := mib << 20
	// The descriptor and diff ID, computed by a first pass that holds
	// nothing either.
	digest, diff := sha256.New(), sha256.New()
	pr, pw := io.Pipe()
	cw := &countWriter{}
	go func() { pw.CloseWithError(bigLayer(io.MultiWriter(pw, digest, cw), total)) }()
	zr, err := gzip.NewReader(pr)
	require.NoError(t, err)
	_, err = io.Copy(diff, zr)
	require.NoError(t, err)
	size := cw.n
	l := layerRef{
		desc:   v1.Descriptor{Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", digest.Sum(nil))}, Size: size},
		diffID: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", diff.Sum(nil))},
		open:   generated(total),
	}

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	tree := NewTree(TreeOptions{})
	err = applyStream(context.Background(), tree, 0, l)
	close(stop)
	<-done
	require.NoError(t, err)
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("streamed a %d MiB layer (%d MiB compressed): heap peak %.1f MiB above the baseline, %d bytes of content kept",
		mib, size>>20, float64(grew)/(1<<20), tree.held)
	const bound = 48 << 20
	assert.Less(t, grew, int64(bound), "the heap grew with the layer")
	assert.Less(t, tree.held, int64(1<<20), "only configuration is kept")
	b, err := tree.ReadFile("etc/systemd/system/big0.service")
	require.NoError(t, err)
	assert.Contains(t, string(b), "ExecStart=/usr/lib/big/0.so")
	fi, err := tree.Lstat("usr/lib/big/0.so")
	require.NoError(t, err)
	assert.Equal(t, int64(32<<20), fi.Size())
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
