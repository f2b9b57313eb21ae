//go:build !amilint_guest

package target

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// openStdin indexes the tarball on r once (tarfs.OpenStream): it cannot be
// read again, so the contents of configuration files are kept and every
// other file as metadata. A terminal is refused rather than waited on.
func openStdin(r io.Reader) (*Image, error) {
	if r == nil {
		return nil, fmt.Errorf("open target -: %w", errors.New("no standard input to read a tarball from"))
	}
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return nil, fmt.Errorf("open target -: %w", errors.New("standard input is a terminal: pipe a root filesystem tarball into it (docker export CONTAINER | amilint scan -)"))
		}
	}
	c := &countingReader{r: r}
	src, err := tarfs.OpenStream(c, tarfs.StreamOptions{})
	if err != nil {
		return nil, fmt.Errorf("open target - (standard input): %w", err)
	}
	return &Image{Name: StdinTarget, Kind: "tar", FS: rootfs.New(src),
		Detail:  "tarball on standard input (" + string(src.Compression()) + "; configuration contents kept, other files as metadata)",
		counter: c}, nil
}

// countingReader counts the bytes read from a stream.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Bytes is the number of bytes read so far.
func (c *countingReader) Bytes() int64 { return c.n.Load() }
